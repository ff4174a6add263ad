/*
 * A GPU for tests, as Open MPI 5.0's accelerator framework sees one: the
 * component "fakegpu" (mca_accelerator_fakegpu.so), loaded from the
 * component path like ipmc. Its "device memory" is mapped twice: where the
 * program sees it, without any access, so that the host touching it
 * directly faults as it would on a GPU's memory, and a second, readable
 * and writable view that only this component's copies use. Everything else
 * is the null component's behaviour. A program allocates and fills such
 * memory through opal_accelerator (mem_alloc, mem_copy), as it would call
 * cudaMalloc and cudaMemcpy.
 *
 * Built by the tests against Open MPI 5.0 only (4.1 has no accelerator
 * framework): mpicc -shared -fPIC -o mca_accelerator_fakegpu.so this.c
 */
#define _GNU_SOURCE
#include "opal_config.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/mca/accelerator/accelerator.h"

#define MAX_ALLOCATIONS 64

/* One allocation: where the program sees it and where its bytes are. */
struct allocation {
    char *device;
    char *shadow;
    size_t size;
};

static struct allocation allocations[MAX_ALLOCATIONS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The allocation holding [addr, addr + len), or NULL. */
static struct allocation *find(const void *addr, size_t len)
{
    const char *a = addr;
    struct allocation *found = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOCATIONS && NULL == found; i++) {
        struct allocation *m = &allocations[i];
        if (NULL != m->device && a >= m->device && a < m->device + m->size
            && len <= (size_t) (m->device + m->size - a)) {
            found = m;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

/* Where the bytes of `addr` (`len` long) can be reached: the shadow of
   device memory, host memory itself. A range that starts in device memory
   and runs past its allocation is an error (NULL). */
static char *reach(const void *addr, size_t len)
{
    struct allocation *m = find(addr, 1);
    if (NULL == m) {
        return (char *) addr;
    }
    if (NULL == find(addr, len)) {
        return NULL;
    }
    return m->shadow + ((const char *) addr - m->device);
}

static int fakegpu_check_addr(const void *addr, int *dev_id, uint64_t *flags)
{
    *flags = 0;
    if (NULL == addr || NULL == find(addr, 1)) {
        return 0;
    }
    *dev_id = 0;
    return 1;
}

static int fakegpu_create_stream(int dev_id, opal_accelerator_stream_t **stream)
{
    *stream = OBJ_NEW(opal_accelerator_stream_t);
    return OPAL_SUCCESS;
}

static int fakegpu_create_event(int dev_id, opal_accelerator_event_t **event)
{
    *event = OBJ_NEW(opal_accelerator_event_t);
    return OPAL_SUCCESS;
}

static int fakegpu_record_event(int dev_id, opal_accelerator_event_t *event,
                                opal_accelerator_stream_t *stream)
{
    return OPAL_SUCCESS;
}

static int fakegpu_query_event(int dev_id, opal_accelerator_event_t *event)
{
    return OPAL_SUCCESS;
}

/* Every copy, overlapping or not, synchronous (a stream's too). */
static int fakegpu_memmove(int dest_dev_id, int src_dev_id, void *dest, const void *src,
                           size_t size, opal_accelerator_transfer_type_t type)
{
    char *d = reach(dest, size), *s = reach(src, size);
    if (NULL == d || NULL == s) {
        return OPAL_ERR_BAD_PARAM;
    }
    memmove(d, s, size);
    return OPAL_SUCCESS;
}

static int fakegpu_memcpy_async(int dest_dev_id, int src_dev_id, void *dest, const void *src,
                                size_t size, opal_accelerator_stream_t *stream,
                                opal_accelerator_transfer_type_t type)
{
    return fakegpu_memmove(dest_dev_id, src_dev_id, dest, src, size, type);
}

static int fakegpu_mem_alloc(int dev_id, void **ptr, size_t size)
{
    size_t page = (size_t) sysconf(_SC_PAGESIZE);
    size_t len = (size + page - 1) / page * page;
    int fd = memfd_create("fakegpu", MFD_CLOEXEC);
    if (fd < 0 || 0 == len || ftruncate(fd, (off_t) len) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    char *device = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
    char *shadow = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (MAP_FAILED == device || MAP_FAILED == shadow) {
        if (MAP_FAILED != device) {
            munmap(device, len);
        }
        if (MAP_FAILED != shadow) {
            munmap(shadow, len);
        }
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    int rc = OPAL_ERR_OUT_OF_RESOURCE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOCATIONS; i++) {
        if (NULL == allocations[i].device) {
            allocations[i] = (struct allocation){device, shadow, len};
            rc = OPAL_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (OPAL_SUCCESS != rc) {
        munmap(device, len);
        munmap(shadow, len);
        return rc;
    }
    *ptr = device;
    return OPAL_SUCCESS;
}

static int fakegpu_mem_release(int dev_id, void *ptr)
{
    struct allocation gone = {NULL, NULL, 0};
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_ALLOCATIONS; i++) {
        if (ptr == allocations[i].device) {
            gone = allocations[i];
            allocations[i] = (struct allocation){NULL, NULL, 0};
        }
    }
    pthread_mutex_unlock(&lock);
    if (NULL == gone.device) {
        return OPAL_ERR_BAD_PARAM;
    }
    munmap(gone.device, gone.size);
    munmap(gone.shadow, gone.size);
    return OPAL_SUCCESS;
}

static int fakegpu_get_address_range(int dev_id, const void *ptr, void **base, size_t *size)
{
    struct allocation *m = find(ptr, 1);
    if (NULL == m) {
        return OPAL_ERR_NOT_FOUND;
    }
    *base = m->device;
    *size = m->size;
    return OPAL_SUCCESS;
}

static int fakegpu_host_register(int dev_id, void *ptr, size_t size)
{
    return OPAL_SUCCESS;
}

static int fakegpu_host_unregister(int dev_id, void *ptr)
{
    return OPAL_SUCCESS;
}

static int fakegpu_get_device(int *dev_id)
{
    *dev_id = 0;
    return OPAL_SUCCESS;
}

static int fakegpu_get_device_pci_attr(int dev_id, opal_accelerator_pci_attr_t *pci_attr)
{
    return OPAL_ERR_NOT_IMPLEMENTED;
}

static int fakegpu_device_can_access_peer(int *access, int dev1, int dev2)
{
    *access = 0;
    return OPAL_SUCCESS;
}

static int fakegpu_get_buffer_id(int dev_id, const void *addr, opal_accelerator_buffer_id_t *buf_id)
{
    struct allocation *m = find(addr, 1);
    if (NULL == m) {
        return OPAL_ERR_NOT_FOUND;
    }
    *buf_id = (opal_accelerator_buffer_id_t) (m - allocations) + 1;
    return OPAL_SUCCESS;
}

static opal_accelerator_base_module_t fakegpu_module = {
    .check_addr = fakegpu_check_addr,
    .create_stream = fakegpu_create_stream,
    .create_event = fakegpu_create_event,
    .record_event = fakegpu_record_event,
    .query_event = fakegpu_query_event,
    .mem_copy_async = fakegpu_memcpy_async,
    .mem_copy = fakegpu_memmove,
    .mem_move = fakegpu_memmove,
    .mem_alloc = fakegpu_mem_alloc,
    .mem_release = fakegpu_mem_release,
    .get_address_range = fakegpu_get_address_range,
    .host_register = fakegpu_host_register,
    .host_unregister = fakegpu_host_unregister,
    .get_device = fakegpu_get_device,
    .get_device_pci_attr = fakegpu_get_device_pci_attr,
    .device_can_access_peer = fakegpu_device_can_access_peer,
    .get_buffer_id = fakegpu_get_buffer_id,
};

static opal_accelerator_base_module_t *fakegpu_init(void)
{
    return &fakegpu_module;
}

static void fakegpu_finalize(opal_accelerator_base_module_t *module)
{
}

OPAL_DECLSPEC opal_accelerator_base_component_t mca_accelerator_fakegpu_component = {
    .base_version = {
        OPAL_ACCELERATOR_BASE_VERSION_1_0_0,
        .mca_component_name = "fakegpu",
        MCA_BASE_MAKE_VERSION(component, OPAL_MAJOR_VERSION, OPAL_MINOR_VERSION,
                              OPAL_RELEASE_VERSION),
    },
    .base_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
    .accelerator_init = fakegpu_init,
    .accelerator_finalize = fakegpu_finalize,
};
