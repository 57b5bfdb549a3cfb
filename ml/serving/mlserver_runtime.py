"""An MLServer custom runtime serving a trained Dynabench artifact over the Open
Inference Protocol (KServe v2), in the shape ``ml.endpoints.oip_v2`` speaks.

A ``model-settings.json`` beside the server names it::

    {"name": "sentiment", "implementation": "ml.serving.mlserver_runtime.ArtifactRuntime",
     "parameters": {"uri": "/path/to/artifact", "extra": {"sha256": "<the artifact's sha256>"}}}

``uri`` is the artifact's folder (relative to the settings file, or absolute); the
optional ``sha256`` makes loading refuse an artifact that is not the registered one.
The request holds one ``BYTES`` tensor of shape ``[n]`` per input field of the task
(``statement``; ``premise``/``hypothesis``; ``passage``/``question``). The answer is,
for classification, ``probabilities``: ``FP64`` ``[n, k]``, the task's labels in
order; for extractive QA, ``start`` and ``end``: ``INT64`` ``[n]``, character offsets
into the passage, end exclusive. A request of another shape is a 400 with the reason.

The predictions are ``ml.predict``'s, to the last bit: the probabilities travel as
the float64 values it returns. They run on a thread, so the server's health and
metadata routes answer while a batch is predicted.
"""

from __future__ import annotations

import asyncio

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse, MetadataTensor, ResponseOutput
from mlserver.utils import get_model_uri

import ml


class ArtifactRuntime(MLModel):
    async def load(self) -> bool:
        extra = (self.settings.parameters.extra if self.settings.parameters else None) or {}
        self.ref = ml.ModelRef(await get_model_uri(self.settings), extra.get("sha256"))
        self.spec = ml.TaskSpec.from_dict(ml.verify_artifact(self.ref.path, self.ref.sha256).metadata["task"])
        # Loaded (and verified) now, with one forward pass: ready means ready to answer.
        await asyncio.to_thread(ml.warm_up, [self.ref])
        # The model's metadata (GET /v2/models/{name}) says what it reads and answers.
        self.inputs = [MetadataTensor(name=name, datatype="BYTES", shape=[-1]) for name in self.spec.input_fields]
        self.outputs = self._output_metadata()
        return True

    def _output_metadata(self) -> list[MetadataTensor]:
        if self.spec.is_qa:
            return [MetadataTensor(name=name, datatype="INT64", shape=[-1]) for name in ("start", "end")]
        return [MetadataTensor(name="probabilities", datatype="FP64", shape=[-1, len(self.spec.labels)])]

    def rows(self, payload: InferenceRequest) -> list[dict[str, str]]:
        fields = self.spec.input_fields
        tensors = {tensor.name: tensor for tensor in payload.inputs}
        if len(tensors) != len(payload.inputs) or set(tensors) != set(fields):
            raise InferenceError(f"expected one input tensor for each of {fields}, got "
                                 f"{[tensor.name for tensor in payload.inputs]}")
        columns = {}
        for name in fields:
            tensor = tensors[name]
            values = StringCodec.decode_input(tensor)
            if tensor.datatype != "BYTES" or tensor.shape != [len(values)]:
                raise InferenceError(f"input {name!r} must be a BYTES tensor of shape [n] with its n values, "
                                     f"not {tensor.datatype} {tensor.shape} with {len(values)}")
            columns[name] = values
        sizes = {len(values) for values in columns.values()}
        if len(sizes) != 1:
            raise InferenceError(f"the inputs hold different numbers of examples: {sorted(sizes)}")
        return [{name: columns[name][i] for name in fields} for i in range(sizes.pop())]

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        rows = self.rows(payload)
        try:
            predictions = await asyncio.to_thread(ml.predict, self.ref, rows) if rows else []
        except ml.InputError as exc:
            raise InferenceError(str(exc)) from exc
        n = len(rows)
        if self.spec.is_qa:
            outputs = [ResponseOutput(name=name, shape=[n], datatype="INT64", data=[p[name] for p in predictions])
                       for name in ("start", "end")]
        else:
            labels = self.spec.labels
            outputs = [ResponseOutput(name="probabilities", shape=[n, len(labels)], datatype="FP64",
                                      data=[float(p["probabilities"][label]) for p in predictions for label in labels])]
        return InferenceResponse(model_name=self.name, model_version=self.version, id=payload.id, outputs=outputs)
