/* Subcommands of the mlxrt binary: each takes the arguments after its name and returns the
 * process exit code. */
#ifndef MLXRT_TOOLS_COMMANDS_H
#define MLXRT_TOOLS_COMMANDS_H

int cmd_inspect(int argc, char **argv);
int cmd_bench_kernels(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* mlxrt bench --batch (cmd_bench_batch.c): the batched decode's table on the loaded model. */
struct bench_args;
struct mlxrt_model;
int bench_batched(struct mlxrt_model *m, const struct bench_args *o);

#endif
