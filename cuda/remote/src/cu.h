/*
 * cu.h — the driver API types the remote client, the launcher and the fake
 * GPU use beyond ../../hook/src/cuda_abi.h (no CUDA headers are needed to
 * build them). Layouts follow cuda.h (CUDA 12/13, LP64).
 */
#ifndef DPUCUDA_REMOTE_CU_H
#define DPUCUDA_REMOTE_CU_H

#include "cuda_abi.h"

typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef int CUfunction_attribute;
typedef int CUdevice_attribute;
typedef int CUjit_option;
typedef int CUlibraryOption;

enum {
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_SYSTEM_NOT_READY = 802,
    CUDA_ERROR_OPERATING_SYSTEM = 304,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_FILE_NOT_FOUND = 301,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209
};

/* CUlaunchAttribute (cuLaunchKernelEx): id then a 64-byte value union. */
struct CUlaunchAttribute_st {
    int id;
    char pad[4];
    union {
        char raw[64];
        struct { unsigned x, y, z; } clusterDim;
        int cooperative;
    } value;
};
enum {
    CU_LAUNCH_ATTRIBUTE_IGNORE = 0,
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2,
    CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY = 3,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT = 7,
    CU_LAUNCH_ATTRIBUTE_PRIORITY = 8,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP = 9,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN = 10,
    CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION = 11,
    CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT = 12,
    CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 14
};

/* CUtensorMap: 128 opaque bytes, 64-byte aligned. */
typedef struct CUtensorMap_st {
    _Alignas(64) uint64_t opaque[16];
} CUtensorMap;

/* cuMemcpy2D's description (CUDA_MEMCPY2D_v2). */
enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_ARRAY = 3, CU_MEMORYTYPE_UNIFIED = 4 };
typedef struct {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

/* Host functions enqueued on streams. */
typedef void (*CUhostFn)(void *userData);
typedef void (*CUstreamCallback)(CUstream hStream, CUresult status, void *userData);

/* cuDeviceGetP2PAttribute */
typedef int CUdevice_P2PAttribute;

/* cuLaunchKernel's extra array. */
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define CU_LAUNCH_PARAM_END_AS_INT 0x00
#define CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT 0x01
#define CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT 0x02

/* Special streams. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* Device attributes the client computes from. */
enum {
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT = 51
};

#endif
