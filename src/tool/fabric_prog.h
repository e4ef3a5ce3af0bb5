/*
 * fabric_prog.h: the sock_ops program of `shunt fabric enable`, as
 * instructions (fabric_prog.c); fabric.c loads, attaches and pins it.
 */
#ifndef SHUNT_FABRIC_PROG_H
#define SHUNT_FABRIC_PROG_H

#include <linux/bpf.h>
#include <stddef.h>
#include <stdint.h>

/* Room for the program; fabric_prog_build says how much it used. */
#define FABRIC_PROG_MAX 96

/* Writes the program that puts shunt's SYN option (registry/synopt.h),
 * carrying boot_tag, on active opens, into insns (cap entries).  The number
 * of instructions, or 0 if cap is too small (a bug). */
size_t fabric_prog_build(struct bpf_insn *insns, size_t cap, uint32_t boot_tag);

#endif
