from setuptools import find_packages, setup

setup(
    name="mlperf_keras",
    version="0.1.0",
    description="The MLPerf Training workloads in Keras 3 (TensorFlow or JAX), from raw data to MLPerf result files",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["mlperf_keras", "mlperf_keras.*", "data_prep", "data_prep.*"]),
    package_data={"mlperf_keras.compliance": ["*.yaml"]},
    install_requires=[
        "numpy>=1.26",
        "absl-py>=2.0",
        "keras>=3.8",
        "mlperf-logging>=4.1",
        "pandas>=2.0",
        "matplotlib>=3.8",
        "pillow>=10",          # data_prep.imagenet: re-encoding PNG/CMYK files, checking images
        "sentencepiece>=0.2",  # data_prep.wmt: the shared subword vocabulary
        "sacrebleu>=2.4",      # BLEU for transformer/gnmt
        "sacremoses>=0.1",     # data_prep.wmt_gnmt and GNMT's BLEU: Moses tokenizer/detokenizer (pure Python)
        "subword-nmt>=0.3.8",  # data_prep.wmt_gnmt: the reference's joint BPE (pure Python)
        "pycocotools>=2.0.7",  # COCO box mAP for ssd (and maskrcnn), and RLE/polygon handling in data_prep.coco
        # The same COCOeval numbers in C++: val2017's evaluation takes seconds instead of pycocotools' minutes at
        # every eval on the MLPerf clock (metrics/coco.py uses it when installed; wheels for CPython 3.10-3.13).
        "faster-coco-eval>=1.7.2",
    ],
    extras_require={
        # TensorFlow is the default backend and the one that reads prepared datasets; JAX needs no TensorFlow.
        "tf": ["tensorflow==2.21.*"],
        "tf-cpu": ["tensorflow-cpu==2.21.*"],
        # TensorFlow with CUDA 12 (cuDNN, NCCL as pip packages). Never run on a GPU by this project (BUILD.md).
        "gpu": ["tensorflow[and-cuda]==2.21.*"],
        # google-crc32c: inputs/record_reader checks every record's CRCs without TensorFlow
        "jax": ["jax>=0.4.30", "google-crc32c>=1.5"],
        # Keras on JAX with CUDA 13 wheels: the path every GPU figure in benchmarks/RESULTS.md was measured on
        # (H200, JAX 0.11.2). The CUDA 13 wheels need a driver that supports CUDA 13; older drivers: jax-cuda12.
        # ImageNet/COCO/WMT input pipelines are tf.data: add tf-cpu (it leaves the GPUs to JAX).
        "jax-cuda": ["jax[cuda13]>=0.7.2", "google-crc32c>=1.5"],
        "jax-cuda12": ["jax[cuda12]>=0.4.30", "google-crc32c>=1.5"],
        # JPEGs decoded on the GPU for the JAX input pipelines (inputs/jpeg_batches.py): nvImageCodec with nvJPEG and
        # CuPy for the batch canvas; without them the pipelines decode on the host (PIL) and say so once.
        "gpu-decode": ["nvidia-nvimgcodec-cu13", "nvidia-nvjpeg", "cupy-cuda13x"],
        # ImageNet's validation labels and PNG/CMYK file lists ship in this wheel; scipy reads the devkit's meta.mat.
        "imagenet": ["tensorflow-datasets>=4.9", "scipy>=1.10"],
        "test": ["pytest>=8", "jax>=0.4.30", "google-crc32c>=1.5", "tensorflow-datasets>=4.9", "scipy>=1.10"],
    },
    entry_points={
        "console_scripts": [
            "mlperf-keras-train=mlperf_keras.train:run_main",
            "mlperf-keras-report=mlperf_keras.report:run",
            "mlperf-keras-estimate=mlperf_keras.estimate:run",
            "mlperf-keras-sweep=mlperf_keras.sweep:run",
        ],
    },
)
