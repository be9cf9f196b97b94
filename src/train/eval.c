/* eval.c — validation loss: eval_iters global batches of the validation split, forward only (no dropout),
 * normalised like training (masked token losses over the unmasked tokens of each batch, averaged over batches),
 * logged as `eval step N, loss: L, ppl: P` and written to metrics.jsonl. Successive evaluations continue through
 * the validation index where the previous one stopped, as PaddleNLP's persistent eval iterator does. */
#include <math.h>

#include "train/trainer.h"

llm4d_code llm4d_trainer_eval(llm4d_trainer *tr, int64_t step, double *loss_out, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const int T = c->data.max_seq_len;
    double total = 0;
    for (int it = 0; it < c->eval_iters; it++) {
        const llm4d_batch *b = llm4d_loader_get(&tr->eval_loader, tr->eval_next++);
        double count = 0;
        for (size_t i = 0; i < (size_t)b->rows * T; i++) count += b->mask[i];
        LLM4D_TRY(llm4d_comm_allreduce(tr->groups->data, &count, 1, LLM4D_COMM_F64, err));
        double loss;
        LLM4D_TRY(llm4d_trainer_run_batch(tr, step, b, count > 0 ? 1.0 / count : 0, 0, &loss, err));
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
