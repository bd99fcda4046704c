# The GLUE-5 teachers' settings, one table for the scripts that fine-tune them (sourced by
# mpnet_glue5_teachers.sh, mpnet_glue5_chain_gpu.sh, mpnet_early_exit_cpu.sh).
# teacher_spec TASK: "epochs batch" of the MPNet-base teacher's fine-tuning.
teacher_spec() { case $1 in sst2) echo "2 32";; cola) echo "3 32";; mrpc|stsb|rte) echo "5 16";; *) return 1;; esac; }
# holdout_rows TASK: training rows a held-out teacher (`finetune --holdout N`, folder TASK-holdout)
# is fine-tuned without, about a tenth (2,000 on SST-2), for recipes that choose on rows it never saw.
holdout_rows() { case $1 in sst2) echo 2000;; mrpc) echo 400;; stsb) echo 600;; rte) echo 250;; cola) echo 850;; *) return 1;; esac; }
