/* report.c — a prediction as text and as JSON (see report.h). */
#include "plan/report.h"

#include <string.h>

#include "backend/backend.h"

#define MiB (1024.0 * 1024.0)

void llm4d_report_text(FILE *f, const llm4d_prediction *p, const llm4d_config *cfg, const char *indent) {
    double compute = 0;
    for (int k = 0; k < LLM4D_WORK_N; k++) compute += p->compute_s[k];
    fprintf(f, "%scompute (stage %d, kernels alone %.3f s, x %.2f sharing the host):", indent, p->critical_stage,
            compute, p->share_slow);
    for (int k = 0; k < LLM4D_WORK_N; k++)
        if (p->compute_s[k] > 0) fprintf(f, " %s %.3f", llm4d_work_name(k), p->compute_s[k]);
    fprintf(f, "\n%scommunication exposed / hidden:", indent);
    int any = 0;
    for (int e = 0; e < LLM4D_ENG_N; e++)
        if (p->exposed_s[e] > 0 || p->hidden_s[e] > 0)
            fprintf(f, " %s %.3f / %.3f", llm4d_eng_name(e), p->exposed_s[e], p->hidden_s[e]), any = 1;
    if (!any) fprintf(f, " none");
    fprintf(f, "\n%spipeline bubble %.3f s; optimizer %.3f s\n", indent, p->bubble_s, p->optimizer_s);
    fprintf(f, "%smemory of rank %d, %.1f MiB:", indent, p->peak_rank, p->peak_bytes / MiB);
    for (int k = 0; k < LLM4D_PM_N; k++)
        if (p->mem[k] > 0) fprintf(f, " %s %.1f", llm4d_pm_name(k), p->mem[k] / MiB);
    fprintf(f, "\n");
    if (p->n_stages > 1 && p->stage_peak) {
        fprintf(f, "%speak MiB per stage:", indent);
        for (int s = 0; s < p->n_stages; s++) fprintf(f, " %.1f", p->stage_peak[s] / MiB);
        fprintf(f, "\n");
    }
    char flags[512];
    llm4d_layout_flags(&p->layout, cfg, flags, sizeof flags);
    fprintf(f, "%sflags: %s\n", indent, flags);
}

const char *llm4d_report_precision(const llm4d_config *cfg) {
    if (!cfg->use_amp) return "fp32";
    const int o1 = !strcmp(cfg->amp_level, "O1");
    if (!strcmp(cfg->amp_dtype, "float16")) return o1 ? "fp16 O1" : "fp16 O2";
    if (!strcmp(cfg->amp_dtype, "tfloat32")) return "tf32";
    return o1 ? "bf16 O1" : "bf16 O2";
}

void llm4d_report_precision_line(FILE *f, const llm4d_config *cfg) {
    const char *grads = !strcmp(cfg->dist.grad_comm_dtype, "bfloat16") ? "bf16" : "fp32";
    if (!cfg->use_amp) {
        fprintf(f, "precision priced: fp32 (no --use_amp: every GEMM at the profile's fp32 rate, fp32 activations and "
                "messages); for bf16 mixed precision ask with --use_amp true (O2: 16-bit activations; --amp_dtype "
                "float16 for fp16, --fp16_opt_level O1 for fp32 activations)\n");
        return;
    }
    const char *p = llm4d_report_precision(cfg);
    if (!strcmp(cfg->amp_level, "O1"))
        fprintf(f, "precision priced: %s mixed precision (16-bit GEMM operands; fp32 activations, pipeline messages "
                "and tensor-parallel gathers; fp32 master weights); gradients reduced in %s (--grad_comm_dtype); "
                "--fp16_opt_level O2 keeps activations in 16 bits\n", p, grads);
    else
        fprintf(f, "precision priced: %s mixed precision (16-bit GEMM operands, activations, pipeline messages and "
                "tensor-parallel gathers; fp32 master weights, tensor-parallel sums and optimizer); gradients "
                "reduced in %s (--grad_comm_dtype)\n", p, grads);
}

cJSON *llm4d_report_json(const llm4d_prediction *p, const llm4d_config *cfg) {
    cJSON *o = cJSON_CreateObject();
    char name[160], flags[512];
    llm4d_layout_name(&p->layout, name, sizeof name);
    llm4d_layout_flags(&p->layout, cfg, flags, sizeof flags);
    cJSON_AddStringToObject(o, "layout", name);
    cJSON_AddStringToObject(o, "flags", flags);
    cJSON_AddStringToObject(o, "precision", llm4d_report_precision(cfg));
    cJSON_AddStringToObject(o, "grad_comm_dtype", cfg->dist.grad_comm_dtype);
    cJSON_AddStringToObject(o, "dp_overlap", cfg->dist.dp_overlap);
    cJSON_AddNumberToObject(o, "world", p->world);
    cJSON_AddNumberToObject(o, "micro_batches", p->M);
    cJSON_AddNumberToObject(o, "step_s", p->step_s);
    cJSON_AddNumberToObject(o, "tokens_per_s", p->tokens_per_s);
    cJSON_AddNumberToObject(o, "peak_mib", p->peak_bytes / MiB);
    cJSON_AddNumberToObject(o, "peak_rank", p->peak_rank);
    cJSON_AddNumberToObject(o, "host_mib", p->host_bytes / MiB);
    if (p->rank_peak) {
        cJSON *a = cJSON_AddArrayToObject(o, "peak_mib_per_rank");
        for (int r = 0; r < p->world; r++) cJSON_AddItemToArray(a, cJSON_CreateNumber(p->rank_peak[r] / MiB));
    }
    if (p->rank_plan) { /* the trainer's "memory plan: X MiB to allocate" of each rank */
        cJSON *a = cJSON_AddArrayToObject(o, "plan_mib_per_rank");
        for (int r = 0; r < p->world; r++) cJSON_AddItemToArray(a, cJSON_CreateNumber(p->rank_plan[r] / MiB));
    }
    if (p->stage_peak) {
        cJSON *a = cJSON_AddArrayToObject(o, "peak_mib_per_stage");
        for (int s = 0; s < p->n_stages; s++) cJSON_AddItemToArray(a, cJSON_CreateNumber(p->stage_peak[s] / MiB));
    }
    cJSON *c = cJSON_AddObjectToObject(o, "compute_s");
    for (int k = 0; k < LLM4D_WORK_N; k++) cJSON_AddNumberToObject(c, llm4d_work_name(k), p->compute_s[k]);
    cJSON_AddNumberToObject(o, "share_slowdown", p->share_slow);
    cJSON *e = cJSON_AddObjectToObject(o, "comm_s");
    for (int k = 0; k < LLM4D_ENG_N; k++) {
        cJSON *x = cJSON_AddObjectToObject(e, llm4d_eng_name(k));
        cJSON_AddNumberToObject(x, "exposed", p->exposed_s[k]);
        cJSON_AddNumberToObject(x, "hidden", p->hidden_s[k]);
    }
    cJSON_AddNumberToObject(o, "bubble_s", p->bubble_s);
    cJSON_AddNumberToObject(o, "optimizer_s", p->optimizer_s);
    cJSON_AddNumberToObject(o, "critical_stage", p->critical_stage);
    cJSON *m = cJSON_AddObjectToObject(o, "memory_mib");
    for (int k = 0; k < LLM4D_PM_N; k++) cJSON_AddNumberToObject(m, llm4d_pm_name(k), p->mem[k] / MiB);
    cJSON_AddNumberToObject(o, "calls_priced_exactly", p->priced_exact);
    cJSON_AddNumberToObject(o, "calls_priced_otherwise", p->priced_other);
    return o;
}
