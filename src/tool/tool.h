/*
 * tool.h: the subcommands of the `shunt` command.
 */
#ifndef SHUNT_TOOL_H
#define SHUNT_TOOL_H

#include <stddef.h>

int cmd_stat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_fabric(int argc, char **argv);

/* The directory the running `shunt` command is in; 0 or -1. */
int tool_self_dir(char *out, size_t outlen);

#endif
