r"""The batched engine's path for MLPs on a CPU: each client's local steps in one thread, the clients in parallel.

On a GPU, products batched over the K clients (:mod:`.batched`) are what the hardware wants. On a CPU they are
not: at each step they stream every client's parameters through memory (31 MB per step for the first MNIST layer
of 50 clients), and a weight update is a rank-B product (B = 32 rows), about 8 floating-point operations per byte
it moves. Here a client instead runs all its Q_k steps in one go, one operation after another, single-threaded, so
that its parameters (0.8 MB for MNIST's 784-200-200-10, 1.6 MB with an offset c - rho z) stay in the core's own
cache from one step to the next; the clients, longest-working first, are dealt to as many threads as torch's
intra-op thread count (``torch.get_num_threads()``), each to the thread with the least work so far.
The steps are the batched engine's (and so the loop engine's),

.. math::  d = s \nabla f_k(x; B_k^t) + c_k + \rho x - \rho z_k + \omega x,\qquad
           b \leftarrow \mu b + d,\qquad x \leftarrow x - \eta b,

the forward and backward passes written out as matrix products, each weight and bias update fused into its
gradient's product (``W.addmm_(delta^T, a, beta=1 - eta * decay, alpha=-eta * s)``, the bias with ``delta^T 1``),
then the offset subtracted (without momentum); with momentum the product goes into the buffer. The mini-batch of
step t is the client's real rows of it (no padding). The loop runs as TorchScript (``torch.jit.script``): its
``fork`` runs a thread's clients on one of torch's inter-op threads without Python's global interpreter lock
(Python threads, which take the lock back after every operation, were slower than one thread). Each operation
runs on one thread (``torch.set_num_threads(1)`` for the duration), so a client's numbers depend neither on which
thread computes it nor on how many threads there are, nor on the other clients of its round.
"""
from __future__ import annotations

import warnings

import torch

# a list of tensors, in the annotations TorchScript compiles
Tensors = list[torch.Tensor]


OUTPUT_GRADIENT_LOSSES = ("cross_entropy", "logistic", "squared")  # the losses output_gradient knows


def output_gradient(z: torch.Tensor, y: torch.Tensor, w: torch.Tensor, loss: str) -> torch.Tensor:
    """d (sum_j w_j loss_j) / d z for outputs z [..., B, C], targets y [..., B] and weights w [..., B] (also the
    batched products' [n, B, C], :mod:`.batched`)."""
    if loss == "cross_entropy":
        g = torch.softmax(z, -1)
        target = y.unsqueeze(-1)
        g.scatter_add_(-1, target, torch.full_like(target, -1.0, dtype=g.dtype))
    elif loss == "logistic":
        g = torch.sigmoid(z) - y.unsqueeze(-1)
    else:  # squared
        g = z - y.unsqueeze(-1)
    return g.mul_(w.unsqueeze(-1))


def _one_client(inputs: torch.Tensor, targets: torch.Tensor, x_rows: torch.Tensor, y_rows: torch.Tensor,
                weights: torch.Tensor, steps: int, layer_weights: Tensors, biases: list[torch.Tensor | None],
                offsets: list[torch.Tensor | None], buffers: list[torch.Tensor | None], loss: str, lr: float,
                scale: float, decay: float, momentum: float) -> None:
    """One client's ``steps`` local steps, in place on its layers (weight [out, in], bias [out] or None).

    x_rows, y_rows, weights: [Q, B] rows of ``inputs`` / ``targets`` in each mini-batch and their weights 1/B_k.
    ``offsets`` and ``buffers`` hold two entries per layer (weight, bias), like ``[W_0, b_0, W_1, b_1, ...]``, or
    none (no offset; no momentum)."""
    layers = len(layer_weights)
    ones = torch.ones(weights.shape[1], dtype=weights.dtype, device=weights.device)
    for t in range(steps):
        a = inputs.index_select(0, x_rows[t])
        acts: Tensors = []
        for j in range(layers):
            acts.append(a)
            bias = biases[j]
            if bias is None:
                a = torch.mm(a, layer_weights[j].t())
            else:
                a = torch.addmm(bias, a, layer_weights[j].t())
            if j + 1 < layers:
                a = a.clamp_min_(0.0)
        delta = output_gradient(a, targets.index_select(0, y_rows[t]), weights[t], loss)
        for i in range(layers):
            j = layers - 1 - i
            weight = layer_weights[j]
            below = delta  # the gradient for the layer below, with this layer's weights before their update
            if j > 0:
                below = torch.ops.aten.threshold_backward(torch.mm(delta, weight), acts[j], 0.0)
            delta_t = delta.t()
            bias = biases[j]
            if len(buffers) == 0:
                weight.addmm_(delta_t, acts[j], beta=1.0 - lr * decay, alpha=-lr * scale)
                if bias is not None:
                    bias.addmv_(delta_t, ones, beta=1.0 - lr * decay, alpha=-lr * scale)
                if len(offsets) > 0:
                    offset_w, offset_b = offsets[2 * j], offsets[2 * j + 1]
                    if offset_w is not None:
                        weight.add_(offset_w, alpha=-lr)
                    if bias is not None and offset_b is not None:
                        bias.add_(offset_b, alpha=-lr)
            else:
                for k in range(2):
                    target = weight if k == 0 else bias
                    buffer = buffers[2 * j + k]
                    if target is not None and buffer is not None:
                        if k == 0:
                            buffer.addmm_(delta_t, acts[j], beta=momentum, alpha=scale)
                        else:
                            buffer.addmv_(delta_t, ones, beta=momentum, alpha=scale)
                        if decay != 0.0:
                            buffer.add_(target, alpha=decay)
                        if len(offsets) > 0:
                            offset = offsets[2 * j + k]
                            if offset is not None:
                                buffer.add_(offset)
                        target.add_(buffer, alpha=-lr)
            delta = below


def _chain(inputs: torch.Tensor, targets: torch.Tensor, x_rows: list[torch.Tensor], y_rows: list[torch.Tensor],
           weights: list[torch.Tensor], steps: list[int], layer_weights: list[Tensors],
           biases: list[list[torch.Tensor | None]], offsets: list[list[torch.Tensor | None]],
           buffers: list[list[torch.Tensor | None]], loss: str, lr: float, scale: float, decay: float,
           momentum: float, clients: list[int]) -> None:
    """The local steps of ``clients``, one after another."""
    for k in clients:
        _one_client(inputs, targets, x_rows[k], y_rows[k], weights[k], steps[k], layer_weights[k], biases[k],
                    offsets[k], buffers[k], loss, lr, scale, decay, momentum)


def _all_clients(inputs: torch.Tensor, targets: torch.Tensor, x_rows: list[torch.Tensor], y_rows: list[torch.Tensor],
                 weights: list[torch.Tensor], steps: list[int], layer_weights: list[Tensors],
                 biases: list[list[torch.Tensor | None]], offsets: list[list[torch.Tensor | None]],
                 buffers: list[list[torch.Tensor | None]], loss: str, lr: float, scale: float, decay: float,
                 momentum: float, chains: list[list[int]]) -> None:
    """Each chain of clients on its own thread: the first chains ``fork`` to inter-op threads, the last runs here."""
    futures: list[torch.jit.Future[None]] = []
    for clients in chains[:-1]:
        futures.append(torch.jit.fork(_chain, inputs, targets, x_rows, y_rows, weights, steps, layer_weights, biases,
                                      offsets, buffers, loss, lr, scale, decay, momentum, clients))
    _chain(inputs, targets, x_rows, y_rows, weights, steps, layer_weights, biases, offsets, buffers, loss, lr, scale,
           decay, momentum, chains[-1])
    for future in futures:
        torch.jit.wait(future)


def chains(work: list, workers: int) -> list[list[int]]:
    """Clients 0..K-1 (longest-working first) dealt to ``min(workers, K)`` chains: each to the chain with the least
    work so far (``work[k]``: client k's steps x rows), the first such chain on a tie."""
    count = max(1, min(workers, len(work)))
    lists, loads = [[] for _ in range(count)], [0] * count
    for k, amount in enumerate(work):
        least = loads.index(min(loads))
        lists[least].append(k)
        loads[least] += amount
    return lists


_compiled = None


def _script():
    """The TorchScript of :func:`_all_clients` (compiled on first use; torch marks ``jit.script`` as deprecated)."""
    global _compiled
    if _compiled is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            _compiled = torch.jit.script(_all_clients)
    return _compiled


def clientwise_steps(task, plan, layers, momentum: float, weight_decay: float) -> None:
    """Every client's local steps of ``plan`` (a :class:`~.batched._Round`), in place on its tensors, on as many
    threads as torch's intra-op thread count (``torch.get_num_threads()``), each operation on one thread."""
    lr, s, decay = plan.shared_coefficients(weight_decay)
    inputs = task.x_all.reshape(len(task.x_all), -1)

    def per_client(tensors: dict | None, k: int) -> list:
        return [] if tensors is None else [None if n is None else tensors[n][k] for pair in layers for n in pair]

    steps, widths = plan.steps.tolist(), plan.widths
    clients = range(len(steps))
    threads = torch.get_num_threads()
    args = (inputs, plan.y_source,
            [plan.x_index[:, k, : widths[k]].contiguous() for k in clients],
            [plan.y_index[:, k, : widths[k]].contiguous() for k in clients],
            [plan.weights[k, :, : widths[k]] for k in clients], steps,
            [[plan.params[w][k] for w, _ in layers] for k in clients],
            [[None if b is None else plan.params[b][k] for _, b in layers] for k in clients],
            [per_client(plan.offset, k) for k in clients], [per_client(plan.buffers, k) for k in clients],
            task.loss.name, lr, s, decay, float(momentum), chains([q * w for q, w in zip(steps, widths)], threads))
    torch.set_num_threads(1)
    try:
        _script()(*args)
    finally:
        torch.set_num_threads(threads)
