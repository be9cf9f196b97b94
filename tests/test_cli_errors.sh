#!/usr/bin/env bash
# test_cli_errors.sh — one convention for the error line of every verb (src/cli/cli.h): bad input to `llm4d VERB`
# exits 2 with exactly one line on stderr, `llm4d VERB: <message>`, with no "error:" after the prefix (the exit
# code says it is one); before a verb runs (an unknown verb) the line is `llm4d: ...`.
#
# The table below has, for each verb, a mistake caught while its arguments are read and one caught later, once it
# works (a file that is not there, a vocabulary, a checkpoint): the two ways a verb reports, so a verb that prints
# its own lines in one place and passes an error up in another is held to the same prefix in both. None of the
# rows needs the GPT-2 vocabulary, a checkpoint or a machine profile: the inputs named do not exist. A job of
# several processes says `llm4d: rank R: ...` instead (tests/test_dp_faults.sh and others check that form).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
cd "$tmp" || exit 1
none=$tmp/none # a path that does not exist
DATA=$SRC_DIR/data/fortunes_ids.npz
TRAIN=(--model_name_or_path gpt2-tiny --max_seq_len 16 --micro_batch_size 2 --global_batch_size 2 --max_steps 1
       --output_dir "$tmp/out")
printf 'Model:\n  hiden_size: 64\n' >typo.yaml
printf '{"text": "a"}\n' >doc.jsonl

# row VERB NAME ARGS...: `llm4d ARGS` is bad input; its one line starts with "llm4d VERB: " ("-": "llm4d: ")
row() {
  local verb=$1 name=$2 prefix rc lines line
  shift 2
  prefix="llm4d $verb: "
  [ "$verb" = - ] && prefix="llm4d: "
  timeout 120 "$LLM4D" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  rc=$?
  lines=$(wc -l <"$tmp/stderr")
  line=$(head -c 300 "$tmp/stderr")
  if [[ $rc -eq 2 && $lines -eq 1 && $line == "$prefix"* && $line != "$prefix"error:* ]]; then
    ok "$verb, $name: $line"
  else
    bad "$verb, $name: exit $rc (want 2), $lines lines (want 1 starting with '$prefix' and no 'error:'): $line"
  fi
}

row train "an unknown key in a YAML file" train -c typo.yaml --input_dir "$DATA"
row train "an unknown flag" train "${TRAIN[@]}" --max_lrr 1e-3 --input_dir "$DATA"
row train "a corpus that does not exist (the trainer's start)" train "${TRAIN[@]}" --input_dir "$none.npz"
row train "a checkpoint to resume that does not exist" train "${TRAIN[@]}" --input_dir "$DATA" --resume "$none"
row eval "no --ckpt" eval "${TRAIN[@]}" --input_dir "$DATA"
row eval "a checkpoint that does not exist" eval "${TRAIN[@]}" --input_dir "$DATA" --ckpt "$none"
row launch "no --nproc" launch -- train
row generate "no --ckpt" generate --prompt_ids 1
row generate "an unknown option" generate --ckpt "$none" --prompt_ids 1 --topk 5
row generate "a checkpoint that does not exist" generate --ckpt "$none" --prompt_ids 1
row generate "a vocabulary that is not there" generate --ckpt "$none" --prompt hi --vocab_dir "$none"
row convert "no --out" convert --to hf --ckpt "$none"
row convert "--vocab_dir with an import" convert --from hf --hf_dir "$none" --out o --vocab_dir "$none"
row convert "an export of a checkpoint that does not exist" convert --to hf --ckpt "$none" --out hf
row convert "an import of a directory without config.json" convert --from hf --hf_dir "$tmp" --out o
row convert "an init with an unknown key" convert --from init --out o -o Model.hiden_size=64
row prepare-data "no --input" prepare-data --output-prefix p
row prepare-data "an input that does not exist" prepare-data --input "$none.jsonl" --output-prefix p
row prepare-data "a vocabulary that is not there" prepare-data --input doc.jsonl --output-prefix p \
  --vocab_dir "$none"
row tokenize "an unknown option" tokenize --bogus
row tokenize "a file that does not exist" tokenize --file "$none.txt"
row tokenize "a vocabulary that is not there" tokenize --vocab_dir "$none" hi
row detokenize "an id that is not a number" detokenize 12 abc
row detokenize "a vocabulary that is not there" detokenize --vocab_dir "$none" 12
row plan "an unknown flag" plan --bogus
row plan "a machine profile that does not exist" plan --evaluate --model_name_or_path gpt2-tiny \
  --global_batch_size 8 --machine_profile "$none.json"
row report "no run directory" report
row report "a run directory that does not exist" report "$none"
row - "an unknown verb" trainn

finish
