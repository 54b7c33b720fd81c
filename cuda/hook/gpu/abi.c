/*
 * abi.c — prints the layout of the driver API types and the values of the
 * enums libdpucuda declares itself (src/cuda_abi.h). gpu-test.sh builds it
 * twice, against cuda_abi.h and against the toolkit's cuda.h (-DREAL), and
 * the two outputs must be equal.
 */
#include <stddef.h>
#include <stdio.h>

#ifdef REAL
#include <cuda.h>
#else
#include "../src/cuda_abi.h"
#endif

#define SIZE(t) printf("sizeof(%s) %zu\n", #t, sizeof(t))
#define OFF(t, m) printf("offsetof(%s, %s) %zu\n", #t, #m, offsetof(t, m))
#define VAL(e) printf("%s %lld\n", #e, (long long)(e))

int main(void) {
    SIZE(CUdeviceptr);
    SIZE(CUdevice);
    SIZE(CUmemGenericAllocationHandle);
    SIZE(CUuuid);
    SIZE(CUDA_ARRAY_DESCRIPTOR);
    OFF(CUDA_ARRAY_DESCRIPTOR, Height);
    OFF(CUDA_ARRAY_DESCRIPTOR, Format);
    OFF(CUDA_ARRAY_DESCRIPTOR, NumChannels);
    SIZE(CUDA_ARRAY3D_DESCRIPTOR);
    OFF(CUDA_ARRAY3D_DESCRIPTOR, Depth);
    OFF(CUDA_ARRAY3D_DESCRIPTOR, Format);
    OFF(CUDA_ARRAY3D_DESCRIPTOR, NumChannels);
    OFF(CUDA_ARRAY3D_DESCRIPTOR, Flags);
    SIZE(CUmemAllocationProp);
    OFF(CUmemAllocationProp, requestedHandleTypes);
    OFF(CUmemAllocationProp, location);
    OFF(CUmemAllocationProp, location.id);
    OFF(CUmemAllocationProp, win32HandleMetaData);
    OFF(CUmemAllocationProp, allocFlags);
    SIZE(CUlaunchConfig);
    OFF(CUlaunchConfig, sharedMemBytes);
    OFF(CUlaunchConfig, hStream);
    OFF(CUlaunchConfig, attrs);
    OFF(CUlaunchConfig, numAttrs);
    VAL(CUDA_SUCCESS);
    VAL(CUDA_ERROR_INVALID_VALUE);
    VAL(CUDA_ERROR_OUT_OF_MEMORY);
    VAL(CUDA_ERROR_NOT_INITIALIZED);
    VAL(CUDA_ERROR_DEINITIALIZED);
    VAL(CUDA_ERROR_NO_DEVICE);
    VAL(CUDA_ERROR_INVALID_DEVICE);
    VAL(CUDA_ERROR_INVALID_IMAGE);
    VAL(CUDA_ERROR_INVALID_CONTEXT);
    VAL(CUDA_ERROR_INVALID_HANDLE);
    VAL(CUDA_ERROR_NOT_FOUND);
    VAL(CUDA_ERROR_NOT_READY);
    VAL(CUDA_ERROR_NOT_SUPPORTED);
    VAL(CUDA_ERROR_UNKNOWN);
    VAL(CU_AD_FORMAT_UNSIGNED_INT8);
    VAL(CU_AD_FORMAT_UNSIGNED_INT16);
    VAL(CU_AD_FORMAT_UNSIGNED_INT32);
    VAL(CU_AD_FORMAT_SIGNED_INT8);
    VAL(CU_AD_FORMAT_SIGNED_INT16);
    VAL(CU_AD_FORMAT_SIGNED_INT32);
    VAL(CU_AD_FORMAT_HALF);
    VAL(CU_AD_FORMAT_FLOAT);
    VAL(CU_MEM_ALLOCATION_TYPE_PINNED);
    VAL(CU_MEM_LOCATION_TYPE_DEVICE);
    VAL(CU_GET_PROC_ADDRESS_DEFAULT);
    VAL(CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    VAL(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    VAL(CU_GET_PROC_ADDRESS_SUCCESS);
    VAL(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    VAL(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    VAL(CU_EVENT_DEFAULT);
    VAL(CU_EVENT_DISABLE_TIMING);
    return 0;
}
