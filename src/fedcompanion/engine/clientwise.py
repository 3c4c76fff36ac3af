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
and, after the last layer's, the offset subtracted from the whole flat row at once (its layers lie back to back in
it, so each number gets the same operations as layer by layer, in one pass instead of one per tensor); with momentum
the products go into the buffer and b <- b + decay x + o, x <- x - eta b (decay = s mu_k + rho + omega) follow on
the whole row. The mini-batch of step t is the client's real rows of it (no padding; a full batch is read in place,
:func:`whole_block`, not copied). A client's thread also sets up the client's tensors just before its first step: it
writes x^0 into the client's row of the result [K, P] (the steps then work on views of that row) and the offset
into one buffer of the thread's (c - rho z; for a
:class:`~fedcompanion.protocol.Negated` c = -lambda, -rho z - lambda, the sign folded in). So none of the products
path's [K, ...] copies in and out, nor its offset tensor for all clients, is made, and what the steps read first is
in the core's cache already. The loop runs as TorchScript (``torch.jit.script``): its ``fork`` runs a thread's
clients on one of torch's inter-op threads without Python's global interpreter lock (Python threads, which take the
lock back after every operation, were slower than one thread). Each operation runs on one thread
(``torch.set_num_threads(1)`` for the duration), and each client's row of the result starts on a 64-byte boundary,
as a tensor of its own does (:func:`aligned_rows`), so a client's numbers depend neither on which thread computes it
nor on how many threads there are, nor on the other clients of its round (a Flower client, which trains alone, gets
the in-process bits). Where torch cannot script it, the same function runs as Python, the clients one after another:
slower, with the same numbers, since every operation is written out (a layer's bias is added after its product:
TorchScript turns ``addmm(b, a, W^T)`` into that, Python would not).
"""
from __future__ import annotations

import warnings

import torch

from ..losses import output_gradient
from ..protocol import Negated

# a list of tensors, in the annotations TorchScript compiles
Tensors = list[torch.Tensor]


def _views(row: torch.Tensor, spec: list[list[int]]) -> tuple[Tensors, list[torch.Tensor | None]]:
    """Per-layer views of a flat parameter row [P]: the weights [out, in] and the biases [out] (None: no bias).
    ``spec`` holds per layer [where W starts, out, in, where b starts or -1]."""
    weights: Tensors = []
    biases: list[torch.Tensor | None] = []
    for start, out, inp, bias in spec:
        weights.append(row.narrow(0, start, out * inp).view(out, inp))
        biases.append(None if bias < 0 else row.narrow(0, bias, out))
    return weights, biases


def _start(row: torch.Tensor, start: torch.Tensor, buffer: torch.Tensor | None, buffer_start: torch.Tensor | None,
           offset: torch.Tensor | None, linear: torch.Tensor | None, negate: bool, pull: torch.Tensor | None,
           rho: float, shared_pull: bool) -> None:
    """A client's tensors before its first step: x = x^0, b = b^0 (or 0) and, into ``offset``, the offset c - rho z
    as -rho z + c, or as -rho z - lambda where ``negate`` (c = -lambda, ``linear`` holding lambda).

    ``pull``: -rho z if ``shared_pull`` (one z for all clients), else z; None: rho = 0. With neither a pull nor
    ``negate``, ``offset`` is already the offset (c itself, or a shared -rho z) and is left as it is."""
    row.copy_(start)
    if buffer is not None:
        if buffer_start is None:
            buffer.zero_()
        else:
            buffer.copy_(buffer_start)
    if offset is None or (pull is None and not negate):
        return  # no offset, or one used as it is (c, or a shared -rho z)
    if pull is None:
        assert linear is not None
        torch.neg(linear, out=offset)  # rho = 0, c = -lambda
        return
    pulled = pull if shared_pull else torch.mul(pull, -rho, out=offset)
    if linear is None:
        return  # -rho z_k, in offset now (a shared -rho z without c comes as the offset itself, with no pull)
    if negate:
        torch.sub(pulled, linear, out=offset)
    else:
        torch.add(linear, pulled, out=offset)


def _buffer_step(row: torch.Tensor, buffer: torch.Tensor, offset: torch.Tensor | None, lr: float,
                 decay: float) -> None:
    """With momentum, the rest of a step once the products have put mu b + s g into b: b <- b + decay x + o,
    x <- x - eta b."""
    if decay != 0.0:
        buffer.add_(row, alpha=decay)
    if offset is not None:
        buffer.add_(offset)
    row.add_(buffer, alpha=-lr)


def _one_client(inputs: torch.Tensor, targets: torch.Tensor, x_rows: torch.Tensor, y_rows: torch.Tensor,
                weights: torch.Tensor, block: torch.Tensor | None, steps: int, spec: list[list[int]],
                row: torch.Tensor, offset: torch.Tensor | None, buffer: torch.Tensor | None, loss: str, lr: float,
                scale: float, decay: float, momentum: float) -> None:
    """One client's ``steps`` local steps, in place on its flat parameter row (and momentum buffer row).

    x_rows, y_rows, weights: [Q, B] rows of ``inputs`` / ``targets`` in each mini-batch and their weights 1/B_k.
    ``block``: where every step's rows are one aligned run of ``inputs`` (a full batch, :func:`whole_block`), that run
    as a view, read in place instead of copied at every step; else None.
    ``offset``: c - rho z as a flat row, or None; ``buffer``: the momentum buffer, or None (no momentum)."""
    layer_weights, biases = _views(row, spec)
    buffer_w: Tensors = []
    buffer_b: list[torch.Tensor | None] = []
    if buffer is not None:
        buffer_w, buffer_b = _views(buffer, spec)
    layers = len(spec)
    ones = torch.ones(weights.shape[1], dtype=weights.dtype, device=weights.device)
    for t in range(steps):
        a = inputs.index_select(0, x_rows[t]) if block is None else block
        acts: Tensors = []
        for j in range(layers):
            acts.append(a)
            bias = biases[j]
            a = torch.mm(a, layer_weights[j].t())
            if bias is not None:
                a.add_(bias)  # not addmm(bias, ...): TorchScript makes that mm + add, eager Python does not
            if j + 1 < layers:
                a = a.clamp_min_(0.0)
        delta = output_gradient(a, targets.index_select(0, y_rows[t]), weights[t], loss)
        for i in range(layers):
            j = layers - 1 - i
            weight, bias = layer_weights[j], biases[j]
            below = delta  # the gradient for the layer below, with this layer's weights before their update
            if j > 0:
                below = torch.ops.aten.threshold_backward(torch.mm(delta, weight), acts[j], 0.0)
            delta_t = delta.t()
            if buffer is None:
                weight.addmm_(delta_t, acts[j], beta=1.0 - lr * decay, alpha=-lr * scale)
                if bias is not None:
                    bias.addmv_(delta_t, ones, beta=1.0 - lr * decay, alpha=-lr * scale)
            else:
                buffer_w[j].addmm_(delta_t, acts[j], beta=momentum, alpha=scale)
                buffer_bias = buffer_b[j]
                if bias is not None and buffer_bias is not None:
                    buffer_bias.addmv_(delta_t, ones, beta=momentum, alpha=scale)
            delta = below
        # the rest of the step, on the whole row at once (every number of it is some layer's: the same operations
        # on each as layer by layer)
        if buffer is None:
            if offset is not None:
                row.add_(offset, alpha=-lr)
        else:
            _buffer_step(row, buffer, offset, lr, decay)


# What _chain gets per client k (lists indexed by k), as one tuple for TorchScript: x_rows, y_rows, weights,
# whole blocks of inputs (or None), parameter rows, their starts, offset rows (or None), momentum-buffer rows (or
# None), their starts (or None: zero), the rows of c or lambda (or None) and of z or -rho z (or None); see _start.
Clients = tuple[Tensors, Tensors, Tensors, list[torch.Tensor | None], Tensors, Tensors, list[torch.Tensor | None],
                list[torch.Tensor | None], list[torch.Tensor | None], list[torch.Tensor | None],
                list[torch.Tensor | None]]


def _chain(inputs: torch.Tensor, targets: torch.Tensor, client_tensors: Clients, steps: list[int],
           spec: list[list[int]], loss: str, lr: float, scale: float, decay: float, momentum: float, rho: float,
           negate: bool, shared_pull: bool, clients: list[int]) -> None:
    """The local steps of ``clients``, one after another, each from its start."""
    x_rows, y_rows, weights, blocks, rows, starts, offsets, buffers, buffer_starts, linears, pulls = client_tensors
    for k in clients:
        _start(rows[k], starts[k], buffers[k], buffer_starts[k], offsets[k], linears[k], negate, pulls[k], rho,
               shared_pull)
        _one_client(inputs, targets, x_rows[k], y_rows[k], weights[k], blocks[k], steps[k], spec, rows[k],
                    offsets[k], buffers[k], loss, lr, scale, decay, momentum)


def _all_clients(inputs: torch.Tensor, targets: torch.Tensor, client_tensors: Clients, steps: list[int],
                 spec: list[list[int]], loss: str, lr: float, scale: float, decay: float, momentum: float, rho: float,
                 negate: bool, shared_pull: bool, chains: list[list[int]]) -> None:
    """Each chain of clients on its own thread: the first chains ``fork`` to inter-op threads, the last runs here.
    Run as Python (where torch cannot script it, :func:`_script`), the chains run one after another, here."""
    if not torch.jit.is_scripting():
        for clients in chains:
            _chain(inputs, targets, client_tensors, steps, spec, loss, lr, scale, decay, momentum, rho, negate,
                   shared_pull, clients)
        return
    futures: list[torch.jit.Future[None]] = []
    for clients in chains[:-1]:
        futures.append(torch.jit.fork(_chain, inputs, targets, client_tensors, steps, spec, loss, lr, scale, decay,
                                      momentum, rho, negate, shared_pull, clients))
    _chain(inputs, targets, client_tensors, steps, spec, loss, lr, scale, decay, momentum, rho, negate, shared_pull,
           chains[-1])
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
    """The TorchScript of :func:`_all_clients`, compiled on first use. torch 2.14 marks ``jit.script`` as
    deprecated; where it fails, :func:`_all_clients` itself, with a warning: the same operations, so the same
    numbers (tests), but the clients' steps on this one thread."""
    global _compiled
    if _compiled is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                _compiled = torch.jit.script(_all_clients)
        except Exception as error:  # noqa: BLE001 (any failure to script: run the Python function instead)
            reason = (str(error).strip().splitlines() or [""])[0]
            warnings.warn(f"torch.jit.script failed ({type(error).__name__}: {reason}); the batched engine's MLP "
                          "steps run in Python, one client after another: the same numbers, on one thread",
                          RuntimeWarning, stacklevel=2)
            _compiled = _all_clients
    return _compiled


ROW_ALIGNMENT = 64  # bytes: where torch's CPU allocator starts every tensor


def whole_block(inputs: torch.Tensor, rows: torch.Tensor) -> torch.Tensor | None:
    """The view of ``inputs`` that every step of a client reads, where its [Q, B] ``rows`` are one run r, r + 1, ...,
    r + B - 1 at every step (a full batch) starting on a 64-byte boundary; else None.

    A step then reads the rows in place: ``index_select`` would copy the same numbers to a new tensor, which also
    starts on a 64-byte boundary, at every step (a full read and write of the client's data, as much memory traffic
    as the step's two products; for QSAR's 450 x 1024 float64 rows, 3.7 MB). With the same numbers, layout and
    alignment, the products give the same bits (tested against the copy)."""
    width = rows.shape[1]
    first = int(rows[0, 0])
    if int(rows[0, -1]) != first + width - 1:  # a mini-batch, almost always: no need to compare every row
        return None
    if not bool((rows == torch.arange(first, first + width, device=rows.device)).all()):
        return None
    block = inputs.narrow(0, first, width)
    return block if block.is_contiguous() and block.data_ptr() % ROW_ALIGNMENT == 0 else None


def aligned_rows(like: torch.Tensor, k: int, p: int) -> torch.Tensor:
    """An empty [k, p] tensor (``like``'s dtype and device) each of whose rows starts on a 64-byte boundary, as a
    tensor of its own does (its row stride is p rounded up to 64 bytes).

    The steps work on a client's row in place, and some of their products give different last bits for the same
    numbers at another address: on AMD Zen CPUs (AVX-512, no AMX) MKL's matrix-vector product, the bias update
    ``b.addmv_(delta^T, 1)``, does for an output b that is not 16-byte aligned (not on Intel's with AMX). In a
    contiguous [K, P] tensor row k starts at 4 k P bytes, so with P = 50,890 (MNIST's 784-64-10) every other row
    is misaligned: a client's numbers would depend on its place among its round's clients, and a Flower client,
    which trains its own row alone, would part from the in-process run. With every row aligned like a tensor of its
    own, a client's steps are the same operations on the same addresses modulo 64 wherever it is in the round."""
    per_row = -(-p * like.element_size() // ROW_ALIGNMENT) * ROW_ALIGNMENT // like.element_size()
    return like.new_empty(k, per_row)[:, :p]


def layer_spec(task, layers) -> list[list[int]]:
    """Where each layer lives in the task's flat parameter vector: per layer [W start, out, in, b start or -1]."""
    layout, spec = task.layout(), []
    for weight, bias in layers:
        at, (out, inp) = layout[weight]
        spec.append([at, out, inp, -1 if bias is None else layout[bias][0]])
    return spec


def clientwise_steps(task, objective, plan, layers) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Every client's local steps of ``objective`` (in ``plan``'s schedule, a :class:`~.batched._Round`) on as
    many threads as torch's intra-op thread count (``torch.get_num_threads()``), each operation on one thread.
    Returns x_k^{Q_k} [K, P] and the final momentum buffers (or None), rows in the caller's client order.

    Each client's row of the result is set to its start, and its offset c - rho z computed, in its own thread just
    before its steps (so they are in that core's cache when the steps begin), the offset into one buffer per thread."""
    lr, s, decay = plan.shared_coefficients(objective.weight_decay)
    inputs = task.x_all.reshape(len(task.x_all), -1)
    k_all, p = objective.start.shape
    steps, widths, order = plan.steps.tolist(), plan.widths, plan.order.tolist()
    threads = torch.get_num_threads()
    dealt = chains([q * w for q, w in zip(steps, widths)], threads)
    x = aligned_rows(objective.start, k_all, p)
    buffers = None if objective.momentum == 0 else aligned_rows(objective.start, k_all, p)
    rho, linear, anchor = float(plan.prox[0]), objective.linear, objective.anchor
    negate = isinstance(linear, Negated)
    linears = [None] * k_all if linear is None else [(linear.rows if negate else linear)[i] for i in order]
    shared_pull = anchor.stride(0) == 0  # one z for all clients (an expanded [P])
    minus_rho_z = anchor[0] * -plan.prox[0] if rho != 0 and shared_pull else None  # of a shared z: once, here
    pulls = [None] * k_all
    if minus_rho_z is not None and linear is None:
        offsets = [minus_rho_z] * k_all  # -rho z is the offset itself
    elif rho != 0 or negate:  # computed per client, into one buffer per thread
        if rho != 0:
            pulls = [minus_rho_z] * k_all if shared_pull else [anchor[i] for i in order]
        scratch = [x.new_empty(p) for _ in dealt]
        offsets = [None] * k_all
        for chain, clients in enumerate(dealt):
            for k in clients:
                offsets[k] = scratch[chain]
    else:
        offsets = linears  # c itself, or no offset at all
    momentum_start = objective.momentum_buffer
    x_rows = [(plan.rows[k, : steps[k], : widths[k]] + plan.x_offsets[k]) for k in range(k_all)]
    client_tensors = (x_rows, [(plan.rows[k, :, : widths[k]] + plan.y_offsets[k]) for k in range(k_all)],
                      [plan.weights[k, :, : widths[k]] for k in range(k_all)],
                      [whole_block(inputs, r) if len(r) else None for r in x_rows], [x[i] for i in order],
                      [objective.start[i] for i in order], offsets,
                      [None if buffers is None else buffers[i] for i in order],
                      [None if momentum_start is None else momentum_start[i] for i in order], linears, pulls)
    spec = layer_spec(task, layers)
    assert sum(out * inp + (out if bias >= 0 else 0) for _, out, inp, bias in spec) == p  # the steps' whole-row ops
    args = (inputs, plan.y_source, client_tensors, steps, spec, task.loss.kernel, lr, s, decay,
            float(objective.momentum), rho, negate, shared_pull, dealt)
    torch.set_num_threads(1)
    try:
        _script()(*args)
    finally:
        torch.set_num_threads(threads)
    return x.contiguous(), (None if buffers is None else buffers.contiguous())
