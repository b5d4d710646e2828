"""One worker of the PyTorch reference: DistributedDataParallel over gloo, on the trainer's exact work.

Runs in its own virtual environment (benchmarks/setup_pytorch.sh makes
.venv-torch), never in the package's: PyTorch is no dependency of
estimator_mnist and CI does not install it. The work is the Keras
comparison's: the classic CNN without dropout (conv5x5x32-pool-conv5x5x64-
pool-dense500-dense10, Keras's Glorot-uniform kernels and zero biases), the
same batches in the same order per worker (benchmarks/ddp_data.py saved them
from input_fn), Adam with the same constant learning rate (Keras's epsilon),
the mean cross-entropy over the global batch (DDP averages the gradients),
the same thread counts. DDP all-reduces gradients in buckets while
backpropagation still runs, the overlap the issue names as a lead.

  .venv-torch/bin/python benchmarks/ddp_reference.py --workers 2 --index 0 --port P \
      --data D/worker-0-of-2-600x64.npz --test D/test.npz --steps 600 --batch 64 \
      --intra 1 --inter 1 --run-dir R --accuracy-out R/accuracy.json

It writes the same progress record as the trainer (estimator_mnist.model_files.progress,
which imports no TensorFlow) to R/progress/worker-<index>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # for estimator_mnist.model_files.progress: this venv has PyTorch, not the package

from estimator_mnist.model_files.progress import ProgressWriter  # noqa: E402
from estimator_mnist.model_files.layout import PROGRESS_DIR


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--port", type=int, required=True, help="rank 0's rendezvous port on 127.0.0.1")
    parser.add_argument("--data", required=True, help="this worker's batches (ddp_data.shards)")
    parser.add_argument("--test", help="the test set (ddp_data.test_set); worker 0 scores it")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--intra", type=int, required=True)
    parser.add_argument("--inter", type=int, required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--accuracy-out")
    return parser.parse_args(argv)


def build_network(torch):
    nn = torch.nn
    network = nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(7 * 7 * 64, 500), nn.ReLU(), nn.Linear(500, 10))
    for module in network:
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(module.weight)  # Keras's default kernel initializer
            nn.init.zeros_(module.bias)
    return network


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(args.intra)
    torch.set_num_interop_threads(args.inter)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.index,
                            world_size=args.workers)
    data = np.load(args.data)
    images = torch.from_numpy(data["images"]).unsqueeze(1)  # uint8 [N, 1, 28, 28]
    labels = torch.from_numpy(data["labels"])
    if len(labels) < args.steps * args.batch:
        raise SystemExit(f"{args.data} holds {len(labels)} examples, fewer than {args.steps} steps x {args.batch}")
    network = torch.nn.parallel.DistributedDataParallel(build_network(torch))
    optimizer = torch.optim.Adam(network.parameters(), lr=args.learning_rate, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    # The path progress_path() gives worker:<index>; config.TaskId would need PyYAML, which this venv lacks.
    writer = ProgressWriter(Path(args.run_dir, PROGRESS_DIR, f"worker-{args.index}.json"), f"worker:{args.index}",
                            examples_per_step=args.batch)
    network.train()
    for step in range(args.steps):
        rows = slice(step * args.batch, (step + 1) * args.batch)
        inputs = images[rows].float().div_(255.0)  # as input_fn's vectorised cast per batch
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(network(inputs), labels[rows])
        loss.backward()
        optimizer.step()
        writer.step(step + 1, float(loss))
    writer.finish(args.steps)
    if args.index == 0 and args.test and args.accuracy_out:
        test = np.load(args.test)
        network.eval()
        with torch.no_grad():
            predicted = network(torch.from_numpy(test["images"]).unsqueeze(1).float() / 255.0).argmax(1)
        accuracy = float((predicted == torch.from_numpy(test["labels"])).float().mean())
        Path(args.accuracy_out).write_text(json.dumps({"accuracy": accuracy}), encoding="utf-8")
    dist.destroy_process_group()
    print(f"ddp-reference worker:{args.index} finished at {time.time():.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
