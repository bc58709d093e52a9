"""A stage's metrics as text, labelled with what they were measured on: written into records
(the run summary's `eval` cell, `compare`'s metrics JSON) and printed by `report` (the run
table, the sweep table). One definition for all of them, in the lowest layer that writes them.
"""

from __future__ import annotations

from recipe_engine.store.records import Manifest, StageMetrics
from recipe_engine.trainers import DEFAULT, trainer_of
from recipe_engine.trainers.kind import TrainerKind


def accuracy_text(manifest: Manifest) -> str | None:
    """ "96%", or "96% (4-bit base)" for a stage trained on a quantized base: `compare`
    measures every stage on the full-precision base, so the two must not be confused."""
    accuracy = manifest.metrics.eval_accuracy
    if accuracy is None:
        return None
    return _labelled(accuracy, manifest.base_precision)


def _labelled(accuracy: float, precision: str | None) -> str:
    """ "96%", "96% (4-bit base)"; no precision recorded is the full-precision base."""
    return f"{accuracy:.0%}" + ("" if precision in (None, "full") else f" ({precision} base)")


def loss_text(manifest: Manifest) -> str | None:
    """ "0.4940", or "0.4940 (4-bit base)": the run's held-out loss, labelled as its accuracy."""
    loss = manifest.metrics.eval_loss
    if loss is None:
        return None
    precision = manifest.base_precision
    own = trainer_of(manifest.config).loss_label  # not the demonstrations' loss: say whose
    labels = [own] if own else []
    labels += [] if precision == "full" else [f"{precision} base"]
    return f"{loss:.4f}" + (f" ({', '.join(labels)})" if labels else "")


def eval_text(manifest: Manifest) -> str:
    """The run table's `eval` cell: the stage's held-out metrics, accuracy and loss labelled
    (a preference stage's loss is its trainer's, not an SFT loss)."""
    return metrics_text(manifest.metrics, manifest.base_precision, trainer_of(manifest.config))


def metrics_text(
    metrics: StageMetrics, precision: str | None, trainer: TrainerKind = DEFAULT
) -> str:
    """ "acc 93% (4-bit base), loss 0.092": `StageMetrics.eval_text` with the accuracy labelled
    with the base it was measured on and the loss with its trainer's name (when not the
    demonstrations' loss)."""
    text = metrics.eval_text()
    if trainer.loss_label:
        text = text.replace("loss ", f"{trainer.loss_label} ", 1)
    if metrics.eval_accuracy is None:
        return text
    # StageMetrics.eval_text writes "acc NN%" first; only the label is added to it here.
    plain = f"acc {metrics.eval_accuracy:.0%}"
    return text.replace(plain, f"acc {_labelled(metrics.eval_accuracy, precision)}", 1)
