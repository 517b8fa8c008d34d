/* A provider library that registers itself as a provider of another
 * private ABI version (PABI, given at build time) or, with PABI 34, with
 * kernel ABI versions doorbell's driver does not speak. Loaded by
 * DOORBELL_PROVIDER_LIB, it must be refused with a message that says why.
 * Built with REENTER, its constructor first asks libibverbs for the
 * device list, while libibverbs is loading it, and prints what it got;
 * built with FORK, it forks, and prints how its child ended; built with
 * LOAD_MLX5, it then loads Debian's libmlx5 in its place, which registers
 * itself, instead of registering. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

struct fake_ops {
	const char *name;
	uint32_t min_abi, max_abi;
	const void *match_table, *static_providers;
	void *fns[5];
};

static const struct fake_ops ops = {.name = "mlx5", .min_abi = 7, .max_abi = 7};

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
void CAT(verbs_register_driver_, PABI)(const struct fake_ops *ops);

#ifdef REENTER
void **ibv_get_device_list(int *num_devices);
void ibv_free_device_list(void **list);
#endif

__attribute__((constructor)) static void fake_register(void)
{
#ifdef REENTER
	int n = -1;
	void **list = ibv_get_device_list(&n);
	fprintf(stderr, "fake provider: nested device list of %d\n", n);
	if (list)
		ibv_free_device_list(list);
#endif
#ifdef FORK
	pid_t pid = fork();
	if (pid == 0)
		_exit(7);
	int status = 0;
	if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
		fprintf(stderr, "fake provider: forked child exited %d\n", WEXITSTATUS(status));
#endif
#ifdef LOAD_MLX5
	if (!dlopen("libmlx5.so.1", RTLD_NOW))
		fprintf(stderr, "fake provider: %s\n", dlerror());
#else
	CAT(verbs_register_driver_, PABI)(&ops);
#endif
}
