# gpuval's container image: gpuval, nccl-tests (MPI build) and perftest (with GPUDirect RDMA) on NVIDIA's PyTorch
# image, which brings CUDA, NCCL, HPC-X Open MPI (/usr/local/mpi) and torch.
#
#   docker build -t ghcr.io/gpuval/gpuval:0.1.0 .
#
# Tag it with gpuval's version: `gpuval deploy kubernetes` (and the engines' container paths) run
# ghcr.io/gpuval/gpuval:<version> unless --image or GPUVAL_IMAGE names another. See docs/operate.md.
#
# Two stages. `gpuval` is gpuval alone on the base: all the DaemonSet's `gpuval health --quick` needs (NVML, the
# kernel log, the Kubernetes client). The last stage, the published image, adds the tools the full checks and the
# benchmarks run. BASE_IMAGE names another base for them: scripts/image-check.sh builds `--target gpuval` on a
# Debian base made with mmdebstrap from Debian's packages (no CUDA there, so not the last stage).
ARG PYTORCH_TAG=25.04-py3
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:${PYTORCH_TAG}

FROM ${BASE_IMAGE} AS gpuval
# gpuval from this checkout, with the engine clients (kubernetes: node labels and taints from inside a pod). Not
# the torch extra: the base image's torch is the one built for its CUDA, and pip must not replace it.
COPY pyproject.toml README.md /opt/gpuval/
COPY src /opt/gpuval/src
RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir "/opt/gpuval[engines]" \
 && gpuval --version
WORKDIR /workspace
CMD ["gpuval", "--help"]

FROM gpuval
# Pinned sources, each at a release tag: https://github.com/NVIDIA/nccl-tests, https://github.com/linux-rdma/perftest
ARG NCCL_TESTS_VERSION=v2.19.6
ARG PERFTEST_VERSION=26.04.17
# Empty: nccl-tests builds for every architecture its CUDA knows (slow); e.g. "-gencode=arch=compute_90,code=sm_90".
ARG NVCC_GENCODE=

# Build tools and the verbs headers perftest needs (its own CI's list); sshd for MPIJob workers (mpirun reaches
# them over ssh). Versions come with the base image's Ubuntu release: pinning them breaks when the archive moves.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      git ca-certificates build-essential autoconf automake libtool pkg-config \
      libibverbs-dev librdmacm-dev libibumad-dev libpci-dev openssh-server \
 && mkdir -p /run/sshd \
 && rm -rf /var/lib/apt/lists/*

# nccl-tests with MPI, as its README builds it: make MPI=1 MPI_HOME=... CUDA_HOME=... (NCCL is in /usr here, where
# the Makefile looks without NCCL_HOME). The *_perf binaries go on PATH: `gpuval submit nccl --use nccl-tests`.
RUN git clone --depth 1 --branch "${NCCL_TESTS_VERSION}" https://github.com/NVIDIA/nccl-tests.git /tmp/nccl-tests \
 && make -C /tmp/nccl-tests -j"$(nproc)" MPI=1 MPI_HOME=/usr/local/mpi CUDA_HOME=/usr/local/cuda \
      BUILDDIR=/opt/nccl-tests/bin ${NVCC_GENCODE:+NVCC_GENCODE="${NVCC_GENCODE}"} \
 && cp /tmp/nccl-tests/LICENSE.txt /opt/nccl-tests/ \
 && rm -rf /tmp/nccl-tests
ENV PATH=/opt/nccl-tests/bin:${PATH}

# perftest (ib_write_bw, ib_read_lat, ...) with CUDA, so --use_cuda measures GPUDirect RDMA: the README's build,
# in one layer with the clean-up (a WORKDIR would leave the sources in the image).
# hadolint ignore=DL3003
RUN git clone --depth 1 --branch "${PERFTEST_VERSION}" https://github.com/linux-rdma/perftest.git /tmp/perftest \
 && cd /tmp/perftest \
 && ./autogen.sh \
 && ./configure --prefix=/usr/local CUDA_H_PATH=/usr/local/cuda/include/cuda.h \
 && make -j"$(nproc)" \
 && make install \
 && rm -rf /tmp/perftest

# nccl4py (NVIDIA's Python bindings of NCCL), so `gpuval bench` calls NCCL directly as nccl-tests does: with the
# cuda-bindings of the image's CUDA major, and without its cu12/cu13 extra, which would add a second NCCL (the
# nvidia-nccl wheel) beside the image's own in /usr, the one torch and nccl-tests use.
RUN cuda_major="$(python -c 'import torch; print(torch.version.cuda.split(".")[0])')" \
 && PIP_BREAK_SYSTEM_PACKAGES=1 python -m pip install --no-cache-dir nccl4py "cuda-bindings==${cuda_major}.*" \
 && gpuval --version
