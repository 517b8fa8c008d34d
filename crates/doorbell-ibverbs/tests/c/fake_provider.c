/* A provider library that registers itself as a provider of another
 * private ABI version (PABI, given at build time) or, with PABI 34, with
 * kernel ABI versions doorbell's driver does not speak. Loaded by
 * DOORBELL_PROVIDER_LIB, it must be refused with a message that says why. */
#include <stddef.h>
#include <stdint.h>

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

__attribute__((constructor)) static void fake_register(void)
{
	CAT(verbs_register_driver_, PABI)(&ops);
}
