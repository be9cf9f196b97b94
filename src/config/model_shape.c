/* model_shape.c — a decoder block's matrix shapes from the description (see model_shape.h). */
#include "config/model_shape.h"

llm4d_model_shape llm4d_model_shape_of(const llm4d_model_config *m, int mp) {
    llm4d_model_shape s = {0};
    const int64_t M = mp > 0 ? mp : 1;
    s.C = m->hidden_size;
    s.F = m->ffn_hidden_size > 0 ? m->ffn_hidden_size : 4 * s.C;
    s.NH = m->num_attention_heads > 0 ? m->num_attention_heads : 1;
    s.NKV = m->num_attention_heads > 0 ? llm4d_model_kv_heads(m) : 1;
    s.HS = s.C / s.NH;
    s.qkv = (s.NH + 2 * s.NKV) * s.HS;
    s.fc = llm4d_model_fc_parts(m) * s.F;
    s.qkv_l = (s.NH / M + 2 * (int64_t)llm4d_model_kv_heads_per_rank(m, (int)M)) * s.HS;
    s.attn_l = s.C / M;
    s.fc_l = s.fc / M;
    s.f_l = s.F / M;
    s.block_matmul = s.C * s.qkv + s.C * s.C + s.C * s.fc + s.F * s.C;
    s.head_matmul = (int64_t)m->vocab_size * s.C;
    s.wpe = !m->rope;
    s.tied = !m->untied;
    return s;
}
