/* eval.c — validation loss: eval_iters global batches of the validation split, forward only (no dropout),
 * normalised like training (masked token losses over the unmasked tokens of each batch, averaged over batches),
 * logged as `eval step N, loss: L, ppl: P` and written to metrics.jsonl. Successive evaluations continue through
 * the validation index where the previous one stopped, as PaddleNLP's persistent eval iterator does. */
#include <math.h>

#include "train/trainer.h"

llm4d_code llm4d_trainer_eval(llm4d_trainer *tr, int64_t step, double *loss_out, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    llm4d_gpt *g = &tr->model;
    const int T = c->data.max_seq_len, mb = (int)c->micro_batch_size;
    double total = 0;
    for (int it = 0; it < c->eval_iters; it++) {
        const llm4d_batch *b = llm4d_loader_get(&tr->eval_loader, tr->eval_next++);
        double count = 0;
        for (size_t i = 0; i < (size_t)b->rows * T; i++) count += b->mask[i];
        LLM4D_TRY(llm4d_comm_allreduce(tr->groups->data, &count, 1, LLM4D_COMM_F64, err));
        double loss = 0;
        for (size_t i = 0; i < (size_t)b->rows * T; i++) tr->dloss[i] = count > 0 ? (float)(b->mask[i] / count) : 0;
        if (tr->pipelined) {
            for (int64_t k = 0; k < c->accumulate_steps; k++) {
                const size_t off = (size_t)k * mb * T;
                tr->mbs[k] = (llm4d_micro){b->tokens + off, b->targets + off, tr->dloss + off, b->sample_ids + k * mb,
                                           (uint32_t)step, 0, 0, mb, T};
            }
            LLM4D_TRY(llm4d_pipeline_run(&tr->pp, tr->mbs, (int)c->accumulate_steps, 1, &loss, err));
        } else {
            for (int64_t k = 0; k < c->accumulate_steps; k++) {
                const size_t off = (size_t)k * mb * T;
                loss += llm4d_gpt_forward(g, b->tokens + off, b->targets + off, tr->dloss + off,
                                          b->sample_ids + k * mb, (uint32_t)step, 0, 0, mb, T);
            }
        }
        LLM4D_TRY(llm4d_tp_check(&g->tp, err));
        LLM4D_TRY(llm4d_trainer_global_loss(tr, &loss, err));
        total += loss;
    }
    const double loss = total / c->eval_iters, ppl = exp(loss);
    llm4d_log_info(&tr->log, "eval step %lld, loss: %.9f, ppl: %.5f", (long long)step, loss, ppl);
    if (tr->metrics) {
        fprintf(tr->metrics, "{\"eval_step\": %lld, \"eval_loss\": %.9f, \"eval_ppl\": %.6f, \"eval_iters\": %d}\n",
                (long long)step, loss, ppl, c->eval_iters);
        fflush(tr->metrics);
    }
    *loss_out = loss;
    return LLM4D_OK;
}
