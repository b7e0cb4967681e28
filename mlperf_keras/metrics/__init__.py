"""Quality metrics, computed as exact counts so they merge across workers by summation."""
