/*
 * tool.h: the subcommands of the `shunt` command.
 */
#ifndef SHUNT_TOOL_H
#define SHUNT_TOOL_H

int cmd_stat(int argc, char **argv);

#endif
