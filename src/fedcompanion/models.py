"""The models of the three papers' experiments, as plain ``torch.nn`` modules.

The engine treats a model only as a template: its parameters are handled as one flat vector and
the module is called through ``torch.func.functional_call``.
"""
from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from .registry import Registry
from .validation import ConfigError, check_number


def linear_model(in_features: int, outputs: int = 1, bias: bool = True) -> nn.Module:
    """x -> W x + b: least squares (1 output, no bias), logistic regression (1 output, binary) or
    multinomial logistic regression (``outputs`` classes)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, outputs, bias=bias))


def mlp(in_features: int, hidden: tuple[int, ...] = (200, 200), num_classes: int = 10) -> nn.Module:
    """Fully connected ReLU network, e.g. 784-200-200-10 (FedVRA-style) or 784-128-64-10 (AdaFedAdam)."""
    layers: list[nn.Module] = [nn.Flatten()]
    sizes = (in_features, *hidden)
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(sizes[-1], num_classes))
    return nn.Sequential(*layers)


def mnist_cnn(num_classes: int = 10) -> nn.Module:
    """A small CNN for 1x28x28 inputs: conv5(16)-pool-conv5(32)-pool-fc128-fc (about 0.2M parameters)."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, num_classes),
    )  # fmt: skip


def cifar_cnn(num_classes: int = 10) -> nn.Module:
    """The AdaFedAdam code's CIFAR-10 CNN: three 3x3 conv layers (64/128/256) with pooling, FC 512."""
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(256 * 4 * 4, 512), nn.ReLU(), nn.Linear(512, num_classes),
    )  # fmt: skip


class Centroids(nn.Module):
    """C centroids in R^d; ``forward(a)`` returns the squared distances ||a_j - mu_c||^2, shape [n, C]."""

    def __init__(self, num_clusters: int, dim: int):
        super().__init__()
        self.mu = nn.Parameter(torch.zeros(num_clusters, dim))

    def reset_parameters(self) -> None:
        """Draw the centroids from N(0, 0.1^2)."""
        nn.init.normal_(self.mu, std=0.1)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        a = a.flatten(1)
        return (a * a).sum(1, keepdim=True) - 2 * a @ self.mu.T + (self.mu * self.mu).sum(1)


def _check_model_builder(name: str, builder: Callable) -> Callable:
    if not callable(builder):
        raise ConfigError(f"model {name!r}: the builder must be callable (in_features, num_classes, **options)")
    return builder


MODELS = Registry("model", _check_model_builder)  # name -> builder(in_features, num_classes, **options) -> nn.Module


def register_model(name: str, builder: Callable | None = None):
    """Register ``builder(in_features, num_classes, **options) -> nn.Module`` as model ``name`` (a decorator without
    ``builder``): a task builder's ``model=name`` and a config's ``task_args`` then reach it, and its code enters the
    key of every run that names it."""
    return MODELS.register(name, builder)


@register_model("linear")
def least_squares_model(in_features: int, num_classes: int = 1, **options) -> nn.Module:
    """Linear regression's model: one output, no bias (``num_classes`` is not read)."""
    return linear_model(in_features, 1, bias=False)


@register_model("logistic")
def logistic_model(in_features: int, num_classes: int, **options) -> nn.Module:
    """Logistic regression: one output for two classes, else one per class (multinomial)."""
    return linear_model(in_features, 1 if num_classes == 2 else num_classes)


@register_model("mlp")
def mlp_model(in_features: int, num_classes: int, hidden=(200, 200), **options) -> nn.Module:
    """:func:`mlp` with its hidden layer sizes checked."""
    for h in hidden:
        check_number("hidden layer size", h, low=1, integer=True)
    return mlp(in_features, tuple(hidden), num_classes)


@register_model("cnn")
def cnn_model(in_features: int, num_classes: int, **options) -> nn.Module:
    """:func:`mnist_cnn`."""
    return mnist_cnn(num_classes)


@register_model("cifar_cnn")
def cifar_cnn_model(in_features: int, num_classes: int, **options) -> nn.Module:
    """:func:`cifar_cnn`."""
    return cifar_cnn(num_classes)


def make_model(name: str, in_features: int, num_classes: int, **options) -> nn.Module:
    """Build model ``name`` (:data:`MODELS`, extended by :func:`register_model`) for data with ``in_features`` inputs
    and ``num_classes`` classes; ``options`` go to its builder (``hidden`` for ``mlp``)."""
    return MODELS.lookup(name)(in_features, num_classes, **options)


RANDOM_LAYERS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def check_model(model: nn.Module, what: str) -> None:
    """Refuse, naming the layer, a model the engines cannot run as a pure function of one flat parameter vector:
    no parameters, integer or frozen ones, random layers (they draw from torch's global generator, so a seed would
    not repeat a run, and would stay active in evaluation), batch normalisation (a sample's output depends on its
    batch, so an update depends on the batching and an evaluation on its chunk size) and layers with running
    statistics (buffers the engines do not keep per client). Dropout at p = 0, LayerNorm, GroupNorm and
    InstanceNorm without running statistics are fine."""
    params = list(model.named_parameters())
    if not params:
        raise ConfigError(f"{what}: the model has no parameters to train")
    for name, p in params:
        if p.is_complex():
            raise ConfigError(f"{what}: parameter {name!r} is {p.dtype}; the engines train real parameters (a "
                              "complex one would lose its imaginary part): store its real and imaginary parts as two "
                              "real parameters")
        if p.dim() == 0:
            raise ConfigError(f"{what}: parameter {name!r} is 0-d (a scalar); give it shape (1,) so that it has a "
                              "row in the flat parameter vector")
        if not p.is_floating_point():
            raise ConfigError(f"{what}: parameter {name!r} is {p.dtype}; every parameter must be floating point")
        if not p.requires_grad:
            raise ConfigError(f"{what}: parameter {name!r} is frozen (requires_grad=False); the engines train every "
                              "parameter: keep a fixed tensor as a buffer (register_buffer) instead")
    for name, layer in model.named_modules():
        if isinstance(layer, RANDOM_LAYERS) and layer.p > 0:
            raise ConfigError(f"{what}: layer {name!r} ({type(layer).__name__}, p={layer.p}) is random: it would "
                              "draw from torch's global generator (a seed would not repeat the run) and stay active "
                              "in evaluation; remove it or set p=0")
        if isinstance(layer, nn.modules.batchnorm._BatchNorm):
            raise ConfigError(f"{what}: layer {name!r} ({type(layer).__name__}) normalises by batch statistics: a "
                              "client's update would depend on its batching; use LayerNorm or GroupNorm")
        if isinstance(layer, nn.modules.instancenorm._InstanceNorm) and layer.track_running_stats:
            raise ConfigError(f"{what}: layer {name!r} ({type(layer).__name__}) keeps running statistics, which "
                              "the engines do not keep per client; use track_running_stats=False")


def check_repeatable(model: nn.Module, x: torch.Tensor, what: str) -> None:
    r"""The determinism contract: a model is accepted only if two forward-backward passes (training mode) from the
    same parameters on the same rows ``x`` give bit-identical outputs and gradients, draw nothing from torch's global
    generator and leave every buffer unchanged. A same config and seed then give the same run; a model that draws
    noise (``RReLU``, ``F.dropout(training=True)``, ``torch.randn_like``, an attention or a recurrent layer's dropout)
    or counts in a buffer is refused by name. The passes run on a copy: ``model`` is not touched."""
    from .validation import ConfigError

    def one_pass(net):
        net.zero_grad(set_to_none=True)
        state = torch.random.get_rng_state()
        out = net(x)
        drew = not torch.equal(state, torch.random.get_rng_state())
        torch.random.set_rng_state(state)
        if not isinstance(out, torch.Tensor):
            return None, None, drew
        out.float().square().sum().backward()
        grads = [p.grad.clone() if p.grad is not None else None for p in net.parameters()]
        return out.detach().clone(), grads, drew

    net = copy.deepcopy(model).train()
    buffers = {name: b.clone() for name, b in net.named_buffers()}
    first, grads, drew = one_pass(net)
    if first is None:
        return  # not a tensor: the caller names it
    second, grads2, drew2 = one_pass(net)
    changed = [name for name, b in net.named_buffers() if name not in buffers or not torch.equal(b, buffers[name])]
    if drew or drew2:
        raise ConfigError(f"{what}: the model draws from torch's global generator in its forward pass (a random "
                          "layer, dropout or noise), so a seed would not repeat a run; remove the randomness")
    if changed:
        raise ConfigError(f"{what}: the model's forward pass changes its buffer(s) {changed}; the engines do not "
                          "keep buffers per client and a run would depend on how often the model was called")
    same_grads = all((a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
                     for a, b in zip(grads, grads2))
    if not torch.equal(first, second) or not same_grads:
        raise ConfigError(f"{what}: two forward-backward passes from the same parameters on the same rows differ; "
                          "the engines need a model whose outputs and gradients repeat exactly")
