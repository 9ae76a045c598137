/*
 * config.h — the settings' one writable copy, for the two files that fill it
 * in at start: options.c (the flags and variables) and config.c (the rest).
 * Every other file reads them through broker.h's cf, a const pointer, so the
 * compiler refuses a write from anywhere else.
 */
#ifndef SANDCELL_BROKER_CONFIG_H
#define SANDCELL_BROKER_CONFIG_H

#ifndef CONFIG_WRITER
#error "only config.c and options.c write the settings; read them through cf"
#endif

#include "broker.h"

extern struct server_config settings;

#endif
