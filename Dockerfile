# One image for every function and the runtime. Its entrypoint is given the component:
#   modelplane function-compose-model-replica --tls-server-certs-dir=/tls/server
#   modelplane runtime agent ...
# (or MODELPLANE_COMPONENT=function-compose-model-replica with no arguments).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY functions ./functions
COPY hack/gen_proto.py ./hack/gen_proto.py
# The scaler's gRPC stubs are generated here by the pinned grpcio-tools, which does not
# stay in the image.
RUN python -m venv /opt/modelplane \
 && /opt/modelplane/bin/pip install --no-cache-dir grpcio-tools==1.84.0 \
 && /opt/modelplane/bin/python hack/gen_proto.py \
 && /opt/modelplane/bin/pip install --no-cache-dir . \
 && /opt/modelplane/bin/pip uninstall -y grpcio-tools

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/modelplane /opt/modelplane
ENV PATH=/opt/modelplane/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Distroless' nonroot uid: nothing in the image needs root.
USER 65532:65532
# 9443: function gRPC; 8080: runtime metrics; 9090: scaler gRPC.
EXPOSE 9443 8080 9090
ENTRYPOINT ["modelplane"]
