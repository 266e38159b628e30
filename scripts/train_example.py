#!/usr/bin/env python3
"""Trains the example MLP and CNN (built through the ODLA API) on synthetic data and reports
loss and accuracy per epoch.

    scripts/train_example.py [--model mlp|cnn|both] [--epochs N] [--optimizer adam] ...
"""

import argparse
import logging
import time

from odla_tvm import train_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--test-size", type=int, default=512)
    parser.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="adam")
    parser.add_argument("--learning-rate", type=float, default=0.005)
    parser.add_argument("--checkpoint", help="store a checkpoint per model at PREFIX.<model>.npz")
    parser.add_argument("--export", help="store an inference executable per model at "
                                         "PREFIX.<model>.odla")
    parser.add_argument("--verbose", action="store_true", help="log compile times")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    started = time.perf_counter()
    train_demo.main(("mlp", "cnn") if args.model == "both" else (args.model,), args.epochs,
                    args.train_size, args.test_size, args.optimizer, args.learning_rate,
                    args.checkpoint, args.export)
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
