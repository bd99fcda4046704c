# The search space of compressor auto on MPNet-base's GLUE tasks (issue 34), one place for the two
# scripts that must agree on it: auto_target_table.sh measures the target's latency table for it on
# the deployment CPU, auto_gpu.sh searches it on the GPU machine with that table (--target-table).
# A table measured for one space serves a search over a part of it; a search that asks for more
# stops before its first trial with the command that measures what is missing.
#   AUTO_SPACE   the space's options (override the lists with HEADS, FFN, TOKENS, PRECISIONS, EXITS,
#                MIN_LAYERS; VOCAB, LAYER_RULES and EXIT_TARGETS need no table entries)
#   auto_seq T   tokens the latency is taken at for task T: the mean token count (MPNet's tokenizer,
#                128 at most) of the rows a teacher fine-tuned with glue5_tasks.sh's --holdout keeps
#                out (seed 42), as compressor auto computes it (SEQ_T overrides it)
# Dynamic INT8 and FP32 only: mixed ranks every unit by quantising it alone (minutes a trial on
# MPNet-base) and static INT8 doubles the table's measuring; both can be added (PRECISIONS).
AUTO_SPACE=(--min-layers "${MIN_LAYERS:-3}" --layer-rules "${LAYER_RULES:-top,importance}"
  --heads "${HEADS:-0,0.25,0.5}" --ffn "${FFN:-0,0.25,0.5}" --vocab "${VOCAB:-false,true}"
  --tokens "${TOKENS:-1,0.8}" --precisions "${PRECISIONS:-fp32,dynamic}" --exits "${EXITS:-none,entropy}"
  --exit-targets "${EXIT_TARGETS:-0.99,0.97}")
# measured on ../shared/glue_data: SST-2 2,000 rows 13.35, MRPC 400 rows 54.00, CoLA 850 rows 11.34
auto_seq() { local v=SEQ_$1; case $1 in sst2) echo ${!v:-13};; mrpc) echo ${!v:-54};; cola) echo ${!v:-11};; *) return 1;; esac; }
