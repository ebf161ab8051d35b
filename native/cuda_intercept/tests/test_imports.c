/*
 * test_imports — memory imported from another process (a cuMemCreate handle through
 * cuMemExportToShareableHandle / cuMemImportFromShareableHandle, a cuMemAlloc pointer
 * through cuIpcGetMemHandle / cuIpcOpenMemHandle_v2) is its creator's: the importer is not
 * charged for it (nvidia-smi does not count it there either: on the H200 an imported and
 * mapped 256 MiB handle left the importer's figure unchanged), releasing or closing the
 * import gives nothing back, and the workload counts the memory once, at its creator.
 * The importer here is a second process of the same workspace (and the creator itself).
 */
#include <sys/wait.h>

#include "ci_test.h"

#define MiB (1ull << 20)
#define LIMIT (16 * MiB)

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags);
CUresult cuIpcCloseMemHandle(CUdeviceptr p);
CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h, int type,
                                      unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type);

static struct ci_region_slot *slot;

static unsigned long long used(void)
{
    return slot->dev[0].memory_used_bytes;
}

static unsigned long long workload_free(void)
{
    size_t fr = 0, total = 0;
    CHECK_CU(cuMemGetInfo_v2(&fr, &total));
    return fr;
}

/* Imports a handle and opens an IPC pointer; none of it may be charged here. */
static void import_both(void)
{
    unsigned long long before = used(), free_before = workload_free();
    CUmemGenericAllocationHandle h = 0;
    CHECK_CU(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CUipcMemHandle ipc;
    memset(&ipc, 0, sizeof ipc);
    CUdeviceptr p = 0;
    CHECK_CU(cuIpcOpenMemHandle_v2(&p, ipc, 1));
    CHECK(used() == before && workload_free() == free_before, "an import was charged: %llu -> %llu",
          before, used());
    CHECK_CU(cuMemRelease(h));
    CHECK_CU(cuIpcCloseMemHandle(p));
    CHECK(used() == before && workload_free() == free_before, "closing an import gave back %llu",
          before - used());
}

static int child(void)
{
    CHECK_CU(cuInit(0));
    slot = ct_slot_of(ct_region(), getpid());
    CHECK(slot != NULL, "child: no slot");
    CHECK(workload_free() == LIMIT - 6 * MiB, "child: the creator's 6 MiB counted %llu free",
          workload_free());
    import_both();
    CHECK(used() == 0, "child charged %llu", used());
    return 0;
}

int main(int argc, char **argv)
{
    char limit[32];
    snprintf(limit, sizeof limit, "%llu", LIMIT);
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", limit);
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child();
    CHECK_CU(cuInit(0));
    slot = ct_slot_of(ct_region(), getpid());
    CHECK(slot != NULL, "no slot");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle h;
    CHECK_CU(cuMemCreate(&h, 4 * MiB, &prop, 0));
    int fd = -1;
    CHECK_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc_v2(&p, 2 * MiB));
    CUipcMemHandle ipc;
    CHECK_CU(cuIpcGetMemHandle(&ipc, p));
    CHECK(used() == 6 * MiB, "creator charged %llu", used());
    import_both(); /* the creator importing its own: still counted once */
    printf("ok imports in the creating process are not charged again\n");

    char path[1024];
    snprintf(path, sizeof path, "%s/test_imports", getenv("CI_TEST_BIN"));
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        execl(path, path, "child", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (%d)", st);
    printf("ok imports in another process of the workload are not charged there\n");

    CHECK_CU(cuMemRelease(h));
    CHECK_CU(cuMemFree_v2(p));
    CHECK(used() == 0 && workload_free() == LIMIT, "creator's frees: %llu", used());
    printf("ok the creator's release and free give it back\n");
    return 0;
}
