/* sim_nvml.c - a simulated NVML (libnvidia-ml.so.1) for the CPU tests.
 *
 * Just what gpumemtrace asks of NVML (preload/nvml.c): a device by UUID,
 * and the processes holding its memory. The calling process is listed with
 * what the simulated runtime charged to it on that device (simGetStats)
 * plus SIM_NVML_CONTEXT bytes (a CUDA context's own memory, 0 if unset);
 * SIM_CUDA_OTHER_USED, when set, is listed as held by another process
 * (pid 1), as on a card that two ranks share. SIM_NVML_PID replaces our
 * pid in the list (a pid namespace NVML does not see). SIM_NVML=off makes
 * nvmlInit fail. Devices are the simulated runtime's UUIDs ("gmtsim-gpu-0"
 * and the ordinal in the last byte).
 *
 * Built as build/sim/libnvidia-ml.so.1; a test puts build/sim on
 * LD_LIBRARY_PATH to make the library find it.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simcudart.h"
#include "sim_env.h"

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_UNKNOWN 999

struct nvml_proc {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};

/* device handles: the ordinal + 1, as a pointer */
typedef void *nvmlDevice_t;

int nvmlInit_v2(void)
{
    const char *e = getenv("SIM_NVML");
    return e && strcmp(e, "off") == 0 ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

int nvmlShutdown(void)
{
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev)
{
    /* "GPU-" then the 16 bytes in hex: "gmtsim-gpu-0" is 676d7473696d2d6770752d30 */
    static const char prefix[] = "GPU-676d7473-696d-2d67-7075-2d30000000";
    if (uuid == NULL || dev == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(uuid) != sizeof prefix - 1 + 2 ||
        strncmp(uuid, prefix, sizeof prefix - 1) != 0)
        return NVML_ERROR_NOT_FOUND;
    int ord = (int)strtol(uuid + sizeof prefix - 1, NULL, 16);
    if (ord < 0 || ord >= 8)
        return NVML_ERROR_NOT_FOUND;
    *dev = (nvmlDevice_t)(uintptr_t)(ord + 1);
    return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                            struct nvml_proc *out)
{
    uintptr_t h = (uintptr_t)dev;
    if (count == NULL || h < 1 || h > 8)
        return NVML_ERROR_INVALID_ARGUMENT;
    void (*stats)(struct simStats *) =
        (void (*)(struct simStats *))dlsym(RTLD_DEFAULT, "simGetStats");
    struct simStats st;
    memset(&st, 0, sizeof st);
    if (stats)
        stats(&st);
    unsigned long long ctx = 0, other = sim_other_used();
    const char *e = getenv("SIM_NVML_CONTEXT");
    if (e && !sim_parse_size(e, &ctx))
        ctx = 0;
    e = getenv("SIM_NVML_PID");
    unsigned int n = other ? 2 : 1;
    if (*count < n || out == NULL) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memset(out, 0, n * sizeof *out);
    out[0].pid = e ? (unsigned int)strtoul(e, NULL, 10) : (unsigned int)getpid();
    out[0].used = st.live_bytes[h - 1] + ctx;
    if (other) {
        out[1].pid = 1;
        out[1].used = other;
    }
    *count = n;
    return NVML_SUCCESS;
}
