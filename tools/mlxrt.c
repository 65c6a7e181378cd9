/* mlxrt: the command-line entry point; dispatches to one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "mlxrt.h"

/* The commit built, when CMake could read it (cmake/version.cmake); empty otherwise. */
#ifndef MLXRT_GIT_COMMIT
#define MLXRT_GIT_COMMIT ""
#endif

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help;
} command;

static const command COMMANDS[] = {
    {"run", cmd_run, "generate an answer to one prompt (streams to stdout)"},
    {"chat", cmd_chat, "interactive multi-turn chat reusing the KV cache"},
    {"inspect", cmd_inspect, "describe a checkpoint: layers, quantization, sizes (--json)"},
    {"bench-kernels", cmd_bench_kernels, "CPU quantized mat-vec GB/s against memcpy"},
    {"perplexity", cmd_perplexity, "perplexity of a text file, llama.cpp's protocol"},
    {"bench", cmd_bench, "llama-bench-style pp/tg throughput, GB/s and % of roofline"},
    {"logits", cmd_logits, "float32 logits of a prompt (and greedy steps) to .safetensors"},
    {"synth", cmd_synth, "random-weight checkpoint with a real model's shapes (no download)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server: chat and completions, streaming"},
    {"tokenize", cmd_tokenize, "encode text to token ids with tokenizer.json, or --decode ids"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: mlxrt COMMAND [options]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
    fprintf(f, "  %-14s %s\n", COMMANDS[i].name, COMMANDS[i].help);
  fprintf(f, "\n'mlxrt COMMAND --help' describes each command's options; 'mlxrt --version' prints the\n"
             "version.\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("mlxrt %s%s%s%s\n", mlxrt_version(), *MLXRT_GIT_COMMIT ? " (commit " : "", MLXRT_GIT_COMMIT,
           *MLXRT_GIT_COMMIT ? ")" : "");
    return 0;
  }
  for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
    if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
  fprintf(stderr, "mlxrt: unknown command '%s' (try 'mlxrt --help')\n", argv[1]);
  return 2;
}
