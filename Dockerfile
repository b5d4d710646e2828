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
USER 1000
ENV PYTHONUNBUFFERED=1
CMD ["estimator-mnist", "--help"]
