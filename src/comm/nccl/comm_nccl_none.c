/* comm_nccl_none.c — the NCCL entry points of comm.h in a build without CUDA: no group has an NCCL communicator,
 * so every data-plane operation takes MPI (comm_dev.c). */
#include "comm/comm.h"

llm4d_code llm4d_comm_nccl_setup(llm4d_comm_groups *g, llm4d_backend *be, char *say, size_t n, llm4d_err *err) {
    (void)g, (void)be, (void)err;
    if (n) say[0] = '\0';
    return LLM4D_OK;
}

void llm4d_comm_nccl_order(llm4d_comm *c, const llm4d_event *ready) { (void)c, (void)ready; }
