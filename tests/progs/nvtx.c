/* nvtx.c - NVTX ranges as phase markers, with no gpumemtrace code in the
 * program: the header-only NVTX v3 API, which loads the injection library
 * NVTX_INJECTION64_PATH names (tests/e2e/test_markers.py).
 *
 *   range "train" (RangePushA), and in it 2 MiB kept;
 *     mark "checkpoint" (MarkA)
 *     range "fwd-é" (RangePushW, a wide string), 1 MiB allocated and freed
 *     range "ex-ascii" (RangePushEx, ASCII message)
 *       range "registered" (DomainRangePushEx, a registered string)
 *   mark "ex-mark" (MarkEx); one pop with nothing open
 * Prints the levels NVTX's push and pop calls return, in order.
 */
#include <stdio.h>
#include <wchar.h>

#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#define MiB (1u << 20)

static nvtxEventAttributes_t attrs(void)
{
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    return a;
}

int main(void)
{
    int lv[8], n = 0;
    void *keep, *tmp;
    lv[n++] = nvtxRangePushA("train");
    cudaMalloc(&keep, 2 * MiB);
    nvtxMarkA("checkpoint");
    lv[n++] = nvtxRangePushW(L"fwd-\u00e9");
    cudaMalloc(&tmp, 1 * MiB);
    cudaFree(tmp);
    lv[n++] = nvtxRangePop();
    nvtxEventAttributes_t a = attrs();
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "ex-ascii";
    lv[n++] = nvtxRangePushEx(&a);
    nvtxDomainHandle_t d = nvtxDomainCreateA("gmt-test");
    nvtxEventAttributes_t r = attrs();
    r.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    r.message.registered = nvtxDomainRegisterStringA(d, "registered");
    lv[n++] = nvtxDomainRangePushEx(d, &r);
    lv[n++] = nvtxDomainRangePop(d);
    lv[n++] = nvtxRangePop();
    lv[n++] = nvtxRangePop();
    a.message.ascii = "ex-mark";
    nvtxMarkEx(&a);
    int extra = nvtxRangePop();
    printf("levels");
    for (int i = 0; i < n; i++)
        printf(" %d", lv[i]);
    printf(" extra %d\n", extra);
    return 0;
}
