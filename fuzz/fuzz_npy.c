/* fuzz_npy.c — libFuzzer harness: a .npy image, parsed in memory (llm4d_npy_parse) and read from a file
 * (llm4d_npy_read). Property: either a user error, or an array whose every byte lies inside the input and whose
 * size is exactly what its dtype and shape say; both readers agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/npz.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    llm4d_array a, b;
    llm4d_err err = {0};
    fz_fresh_dir();
    llm4d_code rc = llm4d_npy_parse(data, size, "fuzz.npy", &a, &err);
    if (rc == LLM4D_OK) {
        if ((const uint8_t *)a.data < data || (const uint8_t *)a.data + a.nbytes > data + size)
            fz_fail("npy data outside the input");
        if ((uint64_t)llm4d_array_numel(&a) * llm4d_dtype_size(a.dtype) != a.nbytes) fz_fail("npy size mismatch");
        if (fz_touch(a.data, a.nbytes) == 0x5eed) abort(); /* keeps the reads */
    } else {
        fz_refused("npy parse", rc, &err);
    }
    char path[1024];
    fz_write("a.npy", data, size, path, sizeof path);
    llm4d_code rc2 = llm4d_npy_read(path, &b, &err);
    if ((rc2 == LLM4D_OK) != (rc == LLM4D_OK)) fz_fail("npy_parse and npy_read disagree: %d vs %d", rc, rc2);
    if (rc2 == LLM4D_OK) {
        if (b.nbytes != a.nbytes || memcmp(a.data, b.data, a.nbytes) != 0) fz_fail("npy_read data differs");
        llm4d_array_free(&b);
    }
    return 0;
}
