#!/usr/bin/env bash
# Asking for the GPU, on any machine:
#   1. where the CUDA backend cannot run (a build without it, a machine without a GPU or without NVIDIA's driver),
#      `train --device cuda`, `train --device gpu`, a YAML's `Global.device: gpu` and `generate --device cuda` are
#      refused with one line naming the problem and the fix, exit 2, no crash; where it can, a one-step run works
#      and its log names the GPU;
#   2. `--device cuda --backend ref` and `--use_amp --amp_dtype tfloat32` on the CPU are one-line user errors;
#   3. CMake's LLM4D_CUDA option: the default (OFF) leaves the backend out even where nvcc is installed; AUTO without
#      nvcc (hidden in a mount namespace, as on a machine without CUDA) configures a CPU-only build; ON without nvcc
#      stops with a line saying how to fix it; AUTO with nvcc installed turns it on (configure only).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
T=(train --model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
   --global_batch_size 4 --micro_batch_size 4 --max_steps 1 --save_steps -1 --output_dir "$tmp/out")

"$LLM4D" "${T[@]}" --device cuda >"$tmp/probe.log" 2>&1
rc=$?
if [ $rc = 0 ]; then # a machine where the GPU works
  check_if "$(has "$tmp/probe.log" "device memory: GPU")" "train --device cuda runs here, and its log names the GPU"
else
  refused "train --device cuda without a usable GPU" "--device cuda: " "$LLM4D" "${T[@]}" --device cuda
  refused "train --device gpu (the seeds' name)" "--device cuda: " "$LLM4D" "${T[@]}" --device gpu
  printf 'Global:\n  device: gpu\n' >"$tmp/gpu.yaml"
  refused "Global.device: gpu in a YAML" "--device cuda: " "$LLM4D" "${T[@]}" -c "$tmp/gpu.yaml"
    "$LLM4D" "${T[@]}" --device cpu --save_steps 1 --output_dir "$tmp/ck" >"$tmp/ck.log" 2>&1
  refused "generate --device cuda" "--device cuda: " "$LLM4D" generate --ckpt "$tmp/ck" --prompt_ids 1 --device cuda
  if grep -q "has no CUDA backend" "$tmp/probe.log"; then
    ok "this build has no CUDA backend, and says how to get one"
  else
    check_if "$(has "$tmp/probe.log" "no usable GPU")" "the CUDA build says the machine has no usable GPU"
  fi
fi
refused "--device cuda --backend ref" "--backend ref runs on the CPU" "$LLM4D" "${T[@]}" --device cuda --backend ref
refused "tfloat32 on the CPU" "tfloat32 operands need a GPU" "$LLM4D" "${T[@]}" --use_amp true --amp_dtype tfloat32
refused "an unknown device" "--device must be one of cpu, guard and cuda" "$LLM4D" generate --ckpt "$tmp/none" \
  --prompt_ids 1 --device tpu

# CMake's option (configure only, in scratch build folders)
configure() { # name args...: configure into $tmp/$name, log in $tmp/$name.log
  local name=$1
  shift
  cmake -S "$SRC_DIR" -B "$tmp/$name" -DCMAKE_BUILD_TYPE=Release "$@" >"$tmp/$name.log" 2>&1
}
configure off
check_if "$(has "$tmp/off.log" "CUDA backend OFF (LLM4D_CUDA=OFF")" \
  "the default configuration leaves the CUDA backend out (LLM4D_CUDA=OFF)"
# A machine without nvcc, simulated in a mount namespace: every nvcc on PATH or in CMake's system folders and the
# CUDA installations hidden. Where namespaces are not allowed the two checks say so and count for nothing.
without_nvcc() { # args of cmake...
  local hide="" d
  for d in $(echo "$PATH" | tr ':' ' ') /usr/local/bin /usr/bin /bin; do [ -e "$d/nvcc" ] && hide+=" $d/nvcc"; done
  env -u CUDACXX unshare -m --propagation private sh -c '
    for f in '"$hide"'; do mount --bind /dev/null "$f" || exit 90; done
    for d in /usr/local/cuda*; do [ -d "$d" ] && { mount -t tmpfs none "$d" || exit 90; }; done
    command -v nvcc >/dev/null && [ -x "$(command -v nvcc)" ] && exit 91
    exec cmake "$@"' sh "$@"
}
without_nvcc -S "$SRC_DIR" -B "$tmp/nonvcc" -DCMAKE_BUILD_TYPE=Release -DLLM4D_CUDA=AUTO >"$tmp/nonvcc.log" 2>&1
rc=$?
if [ $rc = 90 ] || [ $rc = 91 ] || grep -q "unshare: " "$tmp/nonvcc.log"; then
  echo "note: cannot hide nvcc here (no mount namespace): the two checks without nvcc did not run"
else
  check_if "$([ $rc = 0 ] && has "$tmp/nonvcc.log" "CUDA backend OFF")" \
    "AUTO on a machine without nvcc: a CPU-only build configures (rc $rc)"
  without_nvcc -S "$SRC_DIR" -B "$tmp/on" -DCMAKE_BUILD_TYPE=Release -DLLM4D_CUDA=ON >"$tmp/on.log" 2>&1
  rc=$?
  check_if "$([ $rc != 0 ] && has "$tmp/on.log" "LLM4D_CUDA=ON but no CUDA compiler was found")" \
    "LLM4D_CUDA=ON without nvcc: configuring stops and says how to fix it (rc $rc)"
fi
if [ -x /usr/local/cuda/bin/nvcc ]; then
  configure auto -DLLM4D_CUDA=AUTO
  check_if "$(has "$tmp/auto.log" "CUDA backend ON (")" "AUTO with nvcc installed builds the CUDA backend"
fi
finish
