/*
 * meta.c — a file's user metadata, as envd keeps it (X-Metadata-KEY headers
 * of an upload, EntryInfo's metadata): extended attributes user.e2b.KEY. The
 * broker checked an upload's keys and values (printable ASCII, ENVD_META_KEY_MAX,
 * ENVD_META_MAX); what a tenant set otherwise is shown only when it is of
 * that form.
 */
#include <errno.h>
#include <string.h>
#include <stdio.h>
#include <sys/xattr.h>
#include <linux/limits.h>

#include "agent.h"

#define META_PREFIX "user.e2b."

static bool
printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

/* meta's {key: value} on the file fd (a new file: it has none else). 0 or -errno. */
int
meta_set(int fd, json_t *meta)
{
	const char *k;
	json_t *v;
	char name[XATTR_NAME_MAX + 1];

	json_object_foreach(meta, k, v)
	{
		const char *s = json_string_value(v);
		if (!s || snprintf(name, sizeof(name), META_PREFIX "%s", k) >=
		              (int)sizeof(name))
			return -EINVAL;
		if (fsetxattr(fd, name, s, strlen(s), 0) < 0)
			return -errno;
	}
	return 0;
}

/* The metadata of path (not followed) as {key: value}, or NULL when it has none. */
json_t *
meta_of(const char *path)
{
	char names[ENVD_META_MAX * 2], value[ENVD_META_MAX + 1];
	ssize_t n = llistxattr(path, names, sizeof(names));
	size_t total = 0;
	json_t *out = NULL;

	for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(names + i) + 1) {
		const char *key = names + i + strlen(META_PREFIX);
		if (strncmp(names + i, META_PREFIX, strlen(META_PREFIX)) || !*key ||
		    strlen(key) > ENVD_META_KEY_MAX || !printable(key, strlen(key)))
			continue;
		ssize_t len = lgetxattr(path, names + i, value, sizeof(value) - 1);
		if (len < 0 || !printable(value, (size_t)len))
			continue;
		total += strlen(names + i) + (size_t)len;
		if (total > ENVD_META_MAX)
			break;
		value[len] = '\0';
		if (!out)
			out = json_object();
		json_object_set_new(out, key, json_string(value));
	}
	return out;
}
