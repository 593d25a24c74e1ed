"""Every check of a build that needs no build work (:func:`check_build`), run before export, clean-up,
calibration or any gate: by :func:`tritonkit.convert.pipeline.build_from_spec` and by ``tritonkit k8s
package`` (:mod:`tritonkit.deploy.package`), so that nothing fails first in the cluster's build Job.

Checked, each problem one line naming the file (and the array), before anything runs:

- the source's interface: an ONNX file's inputs and outputs (read, not run), a ``source.torch``
  entry point's names and example inputs, a flagship's known inputs;
- the batch axis: ``batching.max_batch_size`` above 0 on a graph whose first axis is fixed is
  refused with the two ways out (``source.dynamic_batch: true`` to rewrite the axis, which the
  clean-up verifies by running the graph, or ``max_batch_size: 0``);
- the data of every set the precisions need (evaluation for fp16/int8/bf16, calibration for int8):
  ``pydoc``/``synthetic`` only where they apply (``auto``, the default, the one that fits, else seeded
  random samples where the model says its inputs' values: :mod:`tritonkit.convert.inputs.seeded_data`), every ``.npz``/``.npy`` readable (a text file named
  ``.npz`` is named as such), its arrays against the inputs (names, dtypes, shapes, equal sample
  counts, NaN/Inf; arrays no input takes and value-preserving casts are warnings), enough samples
  for ``min_samples`` and for the batch of a model whose first axis is fixed;
- calibration and evaluation sets that share a sample (the same file, or equal rows): refused, as
  docs/build-spec.md promises evaluation samples are never calibration samples;
- ``accuracy.output`` naming an output of the model.

The opset is not refused here: the clean-up upgrades old graphs (:mod:`tritonkit.convert.graph.sanitize`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonkit.config.dtypes import numpy_to_triton
from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.graph.export import TorchSource, load_torch_source
from tritonkit.convert.graph.flagship import resnet
from tritonkit.convert.graph.source import spec_folder_importable
from tritonkit.convert.inputs import data, seeded_data
from tritonkit.convert.inputs.datasets import ReadArrays, fixed_batch
from tritonkit.convert.spec import options
from tritonkit.convert.spec.buildspec import BuildSpec
from tritonkit.errors import CalibrationError, ModelImportError, SpecError, TritonKitError
from tritonkit.repository.onnx_io import read_io

__all__ = ["Checked", "ModelIO", "check_build"]


@dataclass
class ModelIO:
    """What the preflight knows of the model before it is built (None: unknown without running code)."""

    inputs: tuple[TensorSpec, ...] | None
    outputs: tuple[str, ...] | None
    batch_dynamic: bool = True
    name: str = "the model"


@dataclass
class Checked:
    """The preflight's findings: warnings to print, the torch source it loaded (built once), and
    the data files it read, by section (read once: the datasets step takes them from here)."""

    warnings: list[str] = field(default_factory=list)
    torch: TorchSource | None = None
    arrays: dict[str, ReadArrays] = field(default_factory=dict)


def _torch_io(source: TorchSource, reference: str) -> ModelIO:
    """The entry point's inputs as exported: example shapes with the dynamic axes as -1."""
    axes = source.axes()
    inputs = []
    try:
        for name, tensor in zip(source.input_names, source.example_inputs, strict=True):
            dtype = numpy_to_triton(tensor.new_empty(0).numpy().dtype)
            shape = tuple(-1 if axis in axes.get(name, {}) else int(d) for axis, d in enumerate(tensor.shape))
            inputs.append(TensorSpec(name=name, datatype=dtype, shape=shape))
    except (AttributeError, TypeError, ValueError, TritonKitError):
        return ModelIO(None, tuple(source.output_names), True, f"`{reference}`")  # learnt after export
    return ModelIO(tuple(inputs), tuple(source.output_names), True, f"`{reference}`")


def _model_io(spec: BuildSpec, load_torch: bool) -> tuple[ModelIO, TorchSource | None]:
    if spec.source.onnx is not None:
        path = spec.resolve(spec.source.onnx)
        if not path.is_file():
            raise ModelImportError(f"ONNX source not found: {str(path)!r}; expected an existing .onnx file")
        graph = read_io(path, check=False)
        return ModelIO(
            graph.inputs, tuple(t.name for t in graph.outputs), graph.batch_dynamic, f"`{path.name}`"
        ), None
    if spec.source.flagship == "resnet50":
        size = spec.preprocessing.image_size
        image = TensorSpec(name=resnet.INPUT, datatype="FP32", shape=(-1, 3, size, size))
        return ModelIO((image,), (resnet.OUTPUT,)), None
    if spec.source.torch is not None and load_torch:
        with spec_folder_importable(spec):
            source = load_torch_source(spec.source.torch)
        return _torch_io(source, spec.source.torch), source
    return ModelIO(None, None), None


def _check_batch(spec: BuildSpec, model: ModelIO) -> ModelIO:
    """Refuse batching a fixed first axis unless it is to be rewritten; the model as built."""
    mbs = spec.batching.max_batch_size
    if model.inputs is None or model.batch_dynamic or spec.as_is:
        return model
    fixed = fixed_batch(model.inputs)
    if spec.source.dynamic_batch and fixed is not None:
        inputs = tuple(TensorSpec(t.name, t.datatype, (-1, *t.shape[1:])) for t in model.inputs)
        return ModelIO(inputs, model.outputs, True, model.name)
    if mbs == "auto" or (isinstance(mbs, int) and mbs > 0):
        first = next((t for t in model.inputs if not t.batch_dynamic), model.inputs[0])
        way = (
            "set `source.dynamic_batch: true` (--dynamic-batch) to rewrite it, or "
            if fixed is not None and not spec.source.dynamic_batch
            else ""
        )
        raise SpecError(
            f"{model.name} has a fixed first axis (input `{first.name}` {list(first.shape)}); "
            f"`batching.max_batch_size` {mbs} needs a dynamic one: {way}set `batching.max_batch_size: 0`"
        )
    return model


def _arrays(spec: BuildSpec, section: str, model: ModelIO, checked: Checked) -> dict[str, Any] | None:
    """The samples ``section`` will use, checked (None: a built-in set or text)."""
    ds = getattr(spec, section)
    text = spec.preprocessing.kind == "text"
    kind = seeded_data.resolve(ds.data, text, model.inputs, section)
    if kind == options.RANDOM and model.inputs is not None:
        examples = checked.torch.example_inputs if checked.torch is not None else None
        seeded_data.random_samples(1, model.inputs, examples, 0, section)  # the one-line refusal, if any
        checked.warnings.append(seeded_data.RANDOM_NOTE.format(section=section))
        return None
    if kind in options.BUILTIN or ds.data.endswith(".txt"):
        if kind == "pydoc" and not text:
            raise SpecError(
                f"spec key `{section}.data`: `pydoc` is English text, for `preprocessing.kind: text` models; "
                f"give an .npz file of input arrays named after the model's inputs"
            )
        if (
            kind == "synthetic"
            and model.inputs is not None
            and (len(model.inputs) != 1 or len(model.inputs[0].shape) != 4)
        ):
            raise SpecError(f"spec key `{section}.data`: `synthetic` needs a single image input (N, C, H, W)")
        if ds.data.endswith(".txt"):
            if not text:
                raise SpecError(
                    f"spec key `{section}.data`: a .txt file is text, for `preprocessing.kind: text` models"
                )
            data.load_text_lines(spec.resolve(ds.data))
        return None
    path = spec.resolve(ds.data)
    arrays = data.read_arrays(path, section)
    if model.inputs is None:  # a torch module not loaded (k8s package): the file itself is checked
        counts = {name: a.shape[0] if a.ndim else 0 for name, a in arrays.items()}
        if len(set(counts.values())) > 1:
            raise CalibrationError(f"{section} arrays in {path.name} differ in sample count: {counts}")
        checked.arrays[section] = ReadArrays(path, arrays)
    else:
        read = arrays
        arrays, notes = data.fit_arrays(read, model.inputs, path, section)
        checked.warnings.extend(notes)
        checked.arrays[section] = ReadArrays(path, read, tuple(model.inputs), arrays, tuple(notes))
    used = {name: value[: ds.samples] for name, value in arrays.items()}
    count = next(iter(used.values())).shape[0] if used else 0
    fixed = fixed_batch(model.inputs) if model.inputs is not None else None
    need = max(ds.min_samples, fixed or 1)
    if count < need:
        what = (
            f"the model's fixed batch of {fixed}"
            if fixed and fixed > ds.min_samples
            else f"`{section}.min_samples`"
        )
        raise CalibrationError(
            f"too few {section} samples: expected at least {need}, got {count} (in {path.name}; {what})"
        )
    if fixed is not None and fixed != ds.batch_size:
        checked.warnings.append(
            f"{section} batches hold {fixed} samples, not `{section}.batch_size` {ds.batch_size}: "
            f"{model.name} has a fixed first axis of {fixed}"
        )
    return used


def _check_overlap(spec: BuildSpec, calibration: dict[str, Any], evaluation: dict[str, Any]) -> None:
    cal_path, ev_path = spec.resolve(spec.calibration.data), spec.resolve(spec.evaluation.data)
    promise = "evaluation samples must be held out from calibration (docs/build-spec.md)"
    if cal_path.resolve() == ev_path.resolve():
        raise CalibrationError(
            f"calibration and evaluation data are the same file {cal_path.name}; {promise}: give two files"
        )
    seen = {digest: i for i, digest in enumerate(data.sample_digests(calibration))}
    shared = [(i, seen[d]) for i, d in enumerate(data.sample_digests(evaluation)) if d in seen]
    if shared:
        ev_index, cal_index = shared[0]
        raise CalibrationError(
            f"{len(shared)} evaluation samples of {ev_path.name} are also calibration samples in "
            f"{cal_path.name} (evaluation sample {ev_index} = calibration sample {cal_index}); {promise}"
        )


def check_build(spec: BuildSpec, *, load_torch: bool = True) -> Checked:
    """Check ``spec`` before any build work (module docstring); SpecError/CalibrationError/
    ModelImportError in one line on the first problem. ``load_torch``: import and call a
    ``source.torch`` entry point to learn its inputs (``tritonkit k8s package`` runs no user code)."""
    checked = Checked()
    if spec.as_is:
        return checked  # served as given: the import reads and checks the graph itself
    model, checked.torch = _model_io(spec, load_torch)
    model = _check_batch(spec, model)
    output = spec.accuracy.output
    if output is not None and model.outputs is not None and output not in model.outputs:
        raise SpecError(
            f"spec key `accuracy.output`: {output!r} is not an output of {model.name}; expected one of {list(model.outputs)}"
        )
    converted = set(spec.precisions) - {"fp32"}
    evaluation = _arrays(spec, "evaluation", model, checked) if converted else None
    calibration = _arrays(spec, "calibration", model, checked) if "int8" in converted else None
    if calibration is not None and evaluation is not None:
        _check_overlap(spec, calibration, evaluation)
    return checked
