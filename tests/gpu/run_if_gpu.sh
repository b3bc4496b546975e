#!/usr/bin/env bash
# Runs the command when a CUDA device is visible, else exits 77 (ctest: skipped).
# torchrun commands also need python3 with torch.
if ! nvidia-smi -L > /dev/null 2>&1; then echo "no CUDA device: skipped"; exit 77; fi
if [ "$1" = torchrun ] && ! python3 -c "import torch" > /dev/null 2>&1; then echo "no PyTorch: skipped"; exit 77; fi
exec "$@"
