"""One loaded export as Serving's handler sees it: its signatures' inputs, metadata, and runs with Serving's
errors. The one module of serve/ that imports TensorFlow (through inference.py, the TF1 loader Serving uses).
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import tensorflow as tf
from google.protobuf.json_format import MessageToDict
from tensorflow.core.framework import types_pb2

from estimator_mnist.tf_model.inference import Classifier
from estimator_mnist.tf_model.serve.request_json import DEFAULT_SIGNATURE
from estimator_mnist.tf_model.serve.serving_errors import CODE_NAMES, invalid, ServingError

ERR_SIGNATURE = 'Serving signature name: "{name}" not found in signature def'  # GetInfoMap
GRAPH_ERROR_PREFIX = "Graph execution error:"
ERR_NO_SIGNATURE = "No signature was found with the name: {name}"  # classifier.cc and regressor.cc


class LoadedModel:
    def __init__(self, export_dir: str):
        self._classifier = Classifier(export_dir)
        self._signatures = dict(self._classifier.signatures)
        self.signature_protos = self._signatures  # SignatureDefs, for gRPC's GetModelMetadata
        # Serving's metadata prints every field, with proto field names (http_rest_api_util.cc ToJsonString).
        self.signature_defs = {name: MessageToDict(definition, preserving_proto_field_name=True,
                                                   including_default_value_fields=True)
                               for name, definition in self._signatures.items()}

    def close(self) -> None:
        self._classifier.__exit__(None, None, None)

    def input_types(self, signature_name: str) -> Dict[str, str]:
        """{input: "DT_FLOAT", ...} of a signature ("" is the default one)."""
        name = signature_name or DEFAULT_SIGNATURE
        if name not in self._signatures:
            raise invalid(ERR_SIGNATURE.format(name=name))
        return {key: types_pb2.DataType.Name(info.dtype) for key, info in self._signatures[name].inputs.items()}

    def output_count(self, signature_name: str) -> int:
        """For `:classify` and `:regress`, which check a signature's outputs before anything else runs."""
        name = signature_name or DEFAULT_SIGNATURE
        if name not in self._signatures:
            raise invalid(ERR_NO_SIGNATURE.format(name=name))
        return len(self._signatures[name].outputs)

    def run(self, signature_name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        try:
            return self._classifier.run(signature_name or DEFAULT_SIGNATURE, inputs)
        except tf.errors.OpError as exc:
            # TF 2.15's Python session puts "Graph execution error:" before the kernel's message; Serving's C++
            # session returns the message alone (tf_workarounds.py lists this; pinned by
            # tests/process/test_serve.py::test_an_undecodable_image_gets_tensorflow_s_own_message).
            message = exc.message.split(GRAPH_ERROR_PREFIX, 1)[-1].lstrip("\n")
            raise ServingError(CODE_NAMES.get(exc.error_code, "UNKNOWN"), message) from None
        except (TypeError, ValueError) as exc:  # a feed numpy cannot hand to TensorFlow
            raise invalid(str(exc)) from None
