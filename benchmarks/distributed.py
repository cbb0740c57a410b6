"""A small transformer whose RMSNorm, SwiGLU and cross-entropy are @jit functions, trained one process
(`single`), under DDP (`ddp`) or FSDP2 (`fsdp`, `fully_shard`): the loss per step and steps per second.

    python benchmarks/distributed.py --mode single --device cpu
    python -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/distributed.py --mode ddp
    python benchmarks/distributed.py --compare --device cuda        # every mode, side by side

The norm is called directly, SwiGLU through its torch op (`as_torch_op`), the loss directly; `--compile`
puts the model under torch.compile. Every mode sees the same global batch at each step (a rank takes
its share of it), the same initial weights and plain SGD, so the loss curves agree up to the order in
which floats are summed (one process sums the whole batch's gradient at once, two ranks sum halves and
all-reduce them): `TOLERANCE` below. Rank 0 prints one JSON line: the losses, steps per second, and
what each rank found about its devices and the disk cache (`report`)."""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import babytriton as bt

# Relative difference of two modes' losses at one step. fp32 sums in another order differ by ~1e-7
# relatively; fifty SGD steps carry such differences forward without growing them past ~1e-5.
TOLERANCE = 1e-4


def rms_norm(x, weight, eps: float):
    return x / bt.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def swiglu(gate, up):
    return gate * bt.sigmoid(gate) * up


def cross_entropy(logits, target):
    """The mean over rows of -log softmax(logits) at the target (one-hot rows)."""
    shifted = logits - bt.max(logits, axis=-1, keepdims=True)
    log_probs = shifted - bt.log(bt.exp(shifted).sum(axis=-1, keepdims=True))
    return -(log_probs * target).sum(axis=-1).mean()


class Kernels:
    """The @jit functions for one device kind; SwiGLU as its torch op."""

    def __init__(self, device: str):
        target = "gpu" if device == "cuda" else "cpu"
        self.norm = bt.jit(target=target)(rms_norm)
        self.loss = bt.jit(target=target)(cross_entropy)
        self.swiglu_jit = bt.jit(target=target)(swiglu)
        self.swiglu = self.swiglu_jit.as_torch_op()

    def functions(self) -> dict:
        return {"rms_norm": self.norm, "swiglu": self.swiglu_jit, "cross_entropy": self.loss}


class RMSNorm(torch.nn.Module):
    def __init__(self, width: int, kernels: Kernels):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))
        self.kernels = kernels

    def forward(self, x):
        return self.kernels.norm(x, self.weight, 1e-5)


class Block(torch.nn.Module):
    """Pre-norm causal self-attention and a SwiGLU MLP, each added to the residual stream."""

    def __init__(self, width: int, heads: int, kernels: Kernels):
        super().__init__()
        self.heads, self.kernels = heads, kernels
        self.norm1, self.norm2 = RMSNorm(width, kernels), RMSNorm(width, kernels)
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
        self.out = torch.nn.Linear(width, width, bias=False)
        self.gate_up = torch.nn.Linear(width, 4 * width, bias=False)
        self.down = torch.nn.Linear(2 * width, width, bias=False)

    def forward(self, h):
        batch, seq, width = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(batch, seq, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.out(attention.transpose(1, 2).reshape(batch, seq, width))
        gate, up = self.gate_up(self.norm2(h)).chunk(2, dim=-1)
        return h + self.down(self.kernels.swiglu(gate.contiguous(), up.contiguous()))


class Model(torch.nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, blocks: int, kernels: Kernels):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads, kernels) for _ in range(blocks))
        self.norm = RMSNorm(width, kernels)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


# --------------------------------------------------------------------------------------------------
# one run: this process, or one rank of a torchrun
# --------------------------------------------------------------------------------------------------

def batches(args) -> torch.Tensor:
    """Every step's global batch of token rows (steps, batch, seq + 1), the same in every mode."""
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1), generator=generator)


def setup(args) -> tuple[int, int, torch.device]:
    """(rank, world size, this rank's device); the process group for ddp and fsdp."""
    if args.mode == ["single"]:
        return 0, 1, torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", device_id=device if args.device == "cuda"
                            else None)
    return rank, world, device


def build(args, mode: str, kernels: Kernels, device: torch.device):
    """The model (the same initial weights everywhere), wrapped for the mode, and its optimizer."""
    torch.manual_seed(0)
    model = Model(args.vocab, args.width, args.heads, args.blocks, kernels).to(device)
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    elif mode == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        # FSDP2's default mesh is on the accelerator when there is one: a CPU run must say it is on the CPU
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    if args.compile != "none":
        model = torch.compile(model, backend=args.compile)
    return model, optimizer


def train(args, model, optimizer, kernels: Kernels, rank: int, world: int, device) -> tuple[list, float]:
    """The global loss at each step, and steps per second after the first `args.warmup` steps."""
    data = batches(args)
    share = args.batch // world
    losses, start = [], None
    for step in range(args.steps):
        if step == args.warmup:
            synchronize(device)
            start = time.perf_counter()
        rows = data[step, rank * share:(rank + 1) * share].to(device)
        logits = model(rows[:, :-1])
        target = F.one_hot(rows[:, 1:].reshape(-1), args.vocab).to(logits.dtype)
        loss = kernels.loss(logits.reshape(-1, args.vocab), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(global_mean(loss.detach(), world))   # read after the timing: no sync per step
    synchronize(device)
    timed = args.steps - args.warmup
    return [loss.item() for loss in losses], timed / (time.perf_counter() - start) if timed > 0 else float("nan")


def global_mean(loss: torch.Tensor, world: int) -> torch.Tensor:
    """The loss over the global batch: the ranks' means averaged (equal shares; gloo has no AVG)."""
    if world > 1:
        loss = loss.clone()
        dist.all_reduce(loss)
        loss /= world
    return loss


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def report(kernels: Kernels, device: torch.device) -> dict:
    """What one rank did: its device, memory torch holds for it on other GPUs (must be none), the GPUs
    it has a CUDA context on (TVM's memory included: must be its own alone), and each function's
    compilations and disk hits."""
    out = {"device": str(device), "pid": os.getpid(), "cache": {}}
    for name, function in kernels.functions().items():
        info = function.cache_info()
        out["cache"][name] = {"compilations": info["compilations"], "disk_hits": info["disk_hits"]}
    if device.type == "cuda":
        found = gpus_with_context(os.getpid())   # before torch asks about the other GPUs below
        # None where it can't be told: no nvidia-smi, or process ids of another namespace (a container)
        out["contexts_on"] = found if found and device.index in found else None
        others = [i for i in range(torch.cuda.device_count()) if i != device.index]
        out["memory_on_other_gpus"] = {i: torch.cuda.memory_allocated(i) for i in others}
    return out


def gpus_with_context(pid: int) -> list[int] | None:
    """The GPUs (torch's indices) where process `pid` has a CUDA context, as nvidia-smi lists them."""
    query = ["nvidia-smi", "--format=csv,noheader"]
    try:
        buses = subprocess.run([*query, "--query-gpu=pci.bus_id"], capture_output=True, text=True, timeout=30)
        apps = subprocess.run([*query, "--query-compute-apps=pid,gpu_bus_id"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    index = {bus.strip(): i for i, bus in enumerate(buses.stdout.splitlines())}   # CUDA_VISIBLE_DEVICES unset
    return sorted({index[bus.strip()] for line in apps.stdout.splitlines() if "," in line
                   for app, bus in [line.split(",", 1)] if app.strip() == str(pid) and bus.strip() in index})


def run(args) -> list[dict]:
    """Train in this process (one rank of a torchrun for ddp and fsdp), each mode of `args.mode` in
    turn (one process group, fresh weights each); rank 0's results (none on the other ranks)."""
    if "single" in args.mode and len(args.mode) > 1:
        raise SystemExit("--mode single runs alone (one process); ddp and fsdp need a torchrun")
    rank, world, device = setup(args)
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must divide into {world} ranks")
    kernels = Kernels(args.device)
    results = []
    for mode in args.mode:
        model, optimizer = build(args, mode, kernels, device)
        losses, steps_per_second = train(args, model, optimizer, kernels, rank, world, device)
        ranks = [report(kernels, device)] * world   # every rank's, so far
        if world > 1:
            dist.all_gather_object(ranks, ranks[0])
        results.append({"mode": mode, "device": args.device, "world": world, "batch": args.batch,
                        "compile": args.compile, "losses": losses, "steps_per_second": steps_per_second,
                        "samples_per_second": steps_per_second * args.batch, "ranks": ranks})
    if world > 1:
        dist.destroy_process_group()
    return results if rank == 0 else []


# --------------------------------------------------------------------------------------------------
# --compare: every mode in its own processes, side by side
# --------------------------------------------------------------------------------------------------

def launch(args, mode: str, batch: int, compile_backend: str = "none", steps: int | None = None) -> dict:
    """One run in fresh processes (torchrun with two ranks for ddp and fsdp); its JSON result."""
    script = os.path.abspath(__file__)
    options = [f"--mode={mode}", f"--device={args.device}", f"--batch={batch}", f"--compile={compile_backend}",
               f"--steps={steps or args.steps}", f"--warmup={args.warmup}", f"--vocab={args.vocab}",
               f"--width={args.width}", f"--heads={args.heads}", f"--blocks={args.blocks}", f"--seq={args.seq}",
               f"--lr={args.lr}"]
    if mode == "single":
        command = [sys.executable, script, *options]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--nnodes=1",
                   f"--master-port={free_port()}", script, *options]
    # one thread per process, as torchrun gives each rank: the modes differ in processes, not threads
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(lines[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compare(args) -> dict:
    """Loss curves of single, ddp, fsdp (and ddp under torch.compile) on one global batch; scaling with a
    fixed global batch and with a fixed batch per GPU."""
    backend = args.compile if args.compile != "none" else ("inductor" if args.device == "cuda" else "aot_eager")
    runs = {"single": launch(args, "single", args.batch), "ddp": launch(args, "ddp", args.batch),
            "fsdp": launch(args, "fsdp", args.batch), f"ddp+{backend}": launch(args, "ddp", args.batch, backend)}
    reference = runs["single"]["losses"]
    worst = {name: max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(run["losses"], reference))
             for name, run in runs.items() if name != "single"}
    scaling = {"fixed global batch": {m: speedup(runs[m], runs["single"]) for m in ("ddp", "fsdp")}}
    if not args.no_weak:
        per_gpu = {m: launch(args, m, 2 * args.batch) for m in ("ddp", "fsdp")}
        scaling["fixed batch per GPU"] = {m: speedup(per_gpu[m], runs["single"]) for m in per_gpu}
    return {"runs": runs, "max_relative_difference": worst, "tolerance": TOLERANCE, "scaling": scaling}


def speedup(two: dict, one: dict) -> dict:
    """Samples per second on two GPUs over one GPU's, and the efficiency (that ratio / 2)."""
    ratio = two["samples_per_second"] / one["samples_per_second"]
    return {"samples_per_second": [one["samples_per_second"], two["samples_per_second"]],
            "throughput_ratio": ratio, "efficiency": ratio / 2}


def show(result: dict) -> None:
    runs = result["runs"]
    names = list(runs)
    print("step  " + "".join(f"{name:>16}" for name in names))
    for step in range(len(runs["single"]["losses"])):
        print(f"{step:4d}  " + "".join(f"{runs[name]['losses'][step]:16.8f}" for name in names))
    for name, diff in result["max_relative_difference"].items():
        verdict = "ok" if diff <= result["tolerance"] else "DIFFERS"
        print(f"{name}: max relative difference from single {diff:.2e} ({verdict}, tolerance {result['tolerance']:g})")
    for name, run in runs.items():
        print(f"{name}: {run['steps_per_second']:.2f} steps/s, {run['samples_per_second']:.1f} samples/s")
    for kind, modes in result["scaling"].items():
        for mode, s in modes.items():
            print(f"scaling, {kind}, {mode}: x{s['throughput_ratio']:.2f} throughput, efficiency {s['efficiency']:.0%}")


def arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("single", "ddp", "fsdp"), nargs="+", default=["single"],
                        help="ddp and fsdp may run one after the other in one torchrun")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", default="none", help="a torch.compile backend (inductor, aot_eager), or none")
    parser.add_argument("--compare", action="store_true", help="run every mode and compare")
    parser.add_argument("--no-weak", action="store_true", help="--compare: skip the fixed-batch-per-GPU runs")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5, help="steps not timed (compiling, loading)")
    parser.add_argument("--batch", type=int, default=32, help="the global batch (rows of tokens)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--timeout", type=int, default=900, help="--compare: seconds per run")
    parser.add_argument("--json", metavar="FILE", help="--compare: also write the whole result there, as JSON")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = arguments(argv)
    if args.compare:
        result = compare(args)
        show(result)
        if args.json:
            with open(args.json, "w") as out:
                json.dump(result, out, indent=1)
        return
    for result in run(args):
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
