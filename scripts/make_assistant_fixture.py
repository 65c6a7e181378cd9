#!/usr/bin/env python3
"""Makes tests/fixtures/mtp/gemma4-assistant-bf16 (or gemma4-e2b-assistant-bf16): a tiny Gemma 4
MTP drafter (transformers' Gemma4AssistantForCausalLM, model_type gemma4_assistant) for the
gemma4-dense-bf16 fixture (or the E2B-like gemma4-e2b-bf16, whose later layers share K/V), and
its golden drafting rounds computed by transformers.

Run:  PY=$(scripts/venv.sh); $PY -m pip install torch==2.15.0
      $PY scripts/make_assistant_fixture.py [--target gemma4-e2b-bf16]

The drafter (2 layers, sliding + full, every layer reading the target's K/V, shaped like the
target's; hidden 96 against the target's 128; the ordered-embedding head with 12 centroids of 32 tokens, top 4) gets
random weights with one planted structure, so that its drafts are right often but not always:
its input projection carries the target's embedding of the last token through the rotation Q
that maps a token's embedding to its successor's (the target fixture's orbits, see
make_tiny_models.rotation_orbits), so its head tends to put the successor first, as the
target's successor MLP does. Everything else is random.

Golden rounds (transformers 5.24, float32, eager attention, the fixture's bf16 weights):
greedy speculative decoding of the target fixture's golden prompt, MTP_K drafts per pass
(fewer near the end, as transformers caps them), N_NEW tokens. Each pass:
  - the drafter runs at position P, the position of the last token chosen (not yet fed to
    the target), on the target's K/V of positions [0, P) of the last non-shared layer of each
    layer type (shared_kv_states of a full forward of the target without a cache), and the
    target's final-normed hidden state (hidden_states[-1]) at P - 1;
  - draft i+1 takes the drafter's argmax i and its projected state (post_projection);
  - the target keeps the drafts its own greedy argmax agrees with, then its next token.
transformers' own assisted generation (SinglePositionMultiTokenCandidateGenerator) slices the
target's K/V by the sequence length instead: after a rejection the drafter also sees the
rejected drafts' K/V (and, past the sliding window, those of every draft of the last pass,
from the sliding cache's extra entries). The loop here passes the K/V of exactly the tokens
kept; the metadata records how often transformers' own loop drafts differently.
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file
from safetensors.torch import load_file as load_torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from make_tiny_models import GAINS, rotation_orbits  # noqa: E402

from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM  # noqa: E402
from transformers.models.gemma4 import Gemma4ForCausalLM, Gemma4TextConfig  # noqa: E402

# target fixture -> (its make_tiny_models seed, the drafter's folder)
TARGETS = {"gemma4-dense-bf16": (21, "gemma4-assistant-bf16"), "gemma4-e2b-bf16": (23, "gemma4-e2b-assistant-bf16")}
TARGET = OUT = TARGET_SEED = None
MTP_K = 4
N_NEW = 32
HA = 96  # the drafter's hidden size
CENTROIDS, TOPK = 12, 4
CLEAR = 0.02  # a draft's top-2 gap, relative to its top logit, that bf16 rounding cannot close


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def load_target():
    cfg = json.loads((TARGET / "config.json").read_text())
    for k in ("hidden_size_per_layer_input", "vocab_size_per_layer_input"):
        cfg.setdefault(k, 0)
    tc = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "dtype")}
    hc = Gemma4TextConfig(**tc)
    hc._attn_implementation = "eager"
    model = Gemma4ForCausalLM(hc).eval().float()
    sd = {k: v.float() for k, v in load_torch(str(TARGET / "model.safetensors")).items()}
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith("inv_freq")]
    if missing or unexpected:
        raise SystemExit(f"target: missing {missing} unexpected {unexpected}")
    return cfg, model


def assistant_config(tcfg):
    text = {k: tcfg[k] for k in ("vocab_size", "rms_norm_eps", "max_position_embeddings", "rope_parameters",
                                 "sliding_window", "head_dim", "global_head_dim", "num_key_value_heads",
                                 "num_global_key_value_heads", "attention_k_eq_v", "hidden_activation",
                                 "pad_token_id", "eos_token_id", "bos_token_id")}
    text.update(hidden_size=HA, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=2,
                hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, enable_moe_block=False,
                use_double_wide_mlp=False, final_logit_softcapping=None, tie_word_embeddings=True)
    c = Gemma4AssistantConfig(text_config=text, backbone_hidden_size=tcfg["hidden_size"],
                              use_ordered_embeddings=True, num_centroids=CENTROIDS,
                              centroid_intermediate_top_k=TOPK)
    c.text_config._attn_implementation = "eager"
    c._attn_implementation = "eager"
    return c


def orbits(emb, q):
    """succ(v) (E[succ v] = Q E[v]) and the 12 orbits of 32 tokens in successor order."""
    succ = np.argmax((emb @ q.T) @ emb.T, axis=1)  # row v: E[j] . (Q E[v])
    seen, order = set(), []
    for v in range(emb.shape[0]):
        if v in seen:
            continue
        o, x = [], v
        while x not in seen:
            seen.add(x)
            o.append(x)
            x = int(succ[x])
        if len(o) != 32 or x != v:
            raise SystemExit(f"orbit of {v}: length {len(o)}, not a 32-cycle")
        order.extend(o)
    return succ, np.array(order)


def init_assistant(model, seed, emb, q, order, th):
    rng = np.random.default_rng(seed)
    p, _ = np.linalg.qr(rng.normal(0, 1, (th, th)))
    p = p[:HA]  # [HA, th], orthonormal rows: the drafter's view of the target's space
    scale = 1.0 / np.sqrt(th)  # the target's embedding rows come scaled by sqrt(th)
    sd = {}
    for name, t in model.state_dict().items():
        shape = tuple(t.shape)
        if name.endswith("embed_tokens.weight") or name == "lm_head.weight":  # tied
            a = emb @ p.T
        elif name == "pre_projection.weight":  # [HA, 2 th]: (embedding, hidden)
            a = np.concatenate([30.0 * scale * p @ q, rng.normal(0, 0.3 / np.sqrt(th), (HA, th))], axis=1)
        elif name == "post_projection.weight":
            a = rng.normal(0, 1.0 / np.sqrt(HA), shape)
        elif name.endswith("masked_embedding.token_ordering"):
            sd[name] = torch.from_numpy(order.astype(np.int64))
            continue
        elif name.endswith("masked_embedding.centroids.weight"):
            a = rng.normal(0, 1.0 / np.sqrt(HA), shape)
        elif name.endswith("layer_scalar"):
            a = rng.uniform(0.5, 1.5, shape)
        elif "norm" in name:
            base = 0.1 if ".post_" in name else 0.25 if ("q_norm" in name) else 1.0
            a = base * (1.0 + 0.2 * rng.normal(0, 1, shape))
        elif len(shape) == 2:
            a = rng.normal(0, 1.0 / np.sqrt(shape[1]), shape)
        else:
            raise SystemExit(f"no init rule for {name} {shape}")
        sd[name] = bf16(torch.from_numpy(np.asarray(a, np.float32)))
    model.load_state_dict(sd, strict=True)


def target_pass(target, ids):
    with torch.no_grad():
        out = target(torch.tensor([ids]), use_cache=False, output_hidden_states=True,
                     return_shared_kv_states=True)
    return out.logits[0], out.hidden_states[-1][0], out.shared_kv_states


def draft(target, assistant, kv, hidden, tok, pos, k):
    """k drafts at position pos from the target's K/V and hidden state; their logits."""
    toks, rows = [], []
    for _ in range(k):
        with torch.no_grad():
            e = target.get_input_embeddings()(torch.tensor([[tok]]))
            out = assistant(inputs_embeds=torch.cat([e, hidden[None, None]], dim=-1),
                            position_ids=torch.tensor([[pos]]), shared_kv_states=kv, use_cache=False)
        row = out.logits[0, -1]
        tok = int(row.argmax())
        hidden = out.last_hidden_state[0, -1]
        toks.append(tok)
        rows.append(row)
    return toks, rows


def margin(row):
    """The top-2 gap relative to the top logit (the ordered head leaves the tokens of the
    centroids not chosen at min - 1)."""
    live = row[row > row.min()]
    top = torch.topk(live, 2).values
    return float((top[0] - top[1]) / top[0].abs())


def golden(target, assistant, prompt):
    ids = list(prompt)
    logits, hid, kv = target_pass(target, ids)
    ids.append(int(logits[-1].argmax()))
    rounds, rows0, margins = [], None, []
    while len(ids) - len(prompt) < N_NEW:
        pos = len(ids) - 1  # the last token chosen, not fed yet
        k = min(MTP_K, len(prompt) + N_NEW - len(ids) - 1)
        if k <= 0:  # the last token: a plain step
            logits, _, _ = target_pass(target, ids)
            ids.append(int(logits[-1].argmax()))
            continue
        _, hid, kv = target_pass(target, ids[:pos])
        drafts, rows = draft(target, assistant, kv, hid[pos - 1], ids[-1], pos, k)
        if rows0 is None:
            rows0 = torch.stack(rows)
        m = [margin(r) for r in rows]
        margins += m
        logits, _, _ = target_pass(target, ids + drafts)
        kept = 0
        for i, d in enumerate(drafts):
            if int(logits[pos + i].argmax()) != d:
                break
            kept += 1
        ids += drafts[:kept] + [int(logits[pos + kept].argmax())]
        rounds.append((pos, k, drafts, kept, m))
    return ids[len(prompt):len(prompt) + N_NEW], rounds, rows0, margins


def transformers_loop(target, assistant, prompt):
    """transformers' own assisted generation: its tokens and the drafts of each pass."""
    from transformers.generation import candidate_generator as cg
    seen = []
    orig = cg.SinglePositionMultiTokenCandidateGenerator.get_candidates

    def spy(self, input_ids, **kw):
        out = orig(self, input_ids, **kw)
        if out[0].shape[1] > input_ids.shape[1]:
            seen.append((input_ids.shape[1] - 1, out[0][0, input_ids.shape[1]:].tolist()))
        return out
    cg.SinglePositionMultiTokenCandidateGenerator.get_candidates = spy
    try:
        assistant.generation_config.num_assistant_tokens = MTP_K
        with torch.no_grad():
            out = target.generate(torch.tensor([prompt]), assistant_model=assistant, max_new_tokens=N_NEW,
                                  do_sample=False)
    finally:
        cg.SinglePositionMultiTokenCandidateGenerator.get_candidates = orig
    return out[0, len(prompt):].tolist(), seen


def main():
    import argparse
    global TARGET, OUT, TARGET_SEED
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", choices=sorted(TARGETS), default="gemma4-dense-bf16")
    args = ap.parse_args()
    TARGET_SEED, out = TARGETS[args.target]
    TARGET = ROOT / "tests/fixtures/models" / args.target
    OUT = ROOT / "tests/fixtures/mtp" / out
    make(args.target)


def make(target_name):
    import transformers
    torch.manual_seed(0)
    tcfg, target = load_target()
    th = tcfg["hidden_size"]
    emb, q, _, _ = rotation_orbits(np.random.default_rng(TARGET_SEED), th, GAINS["embed"])
    e_file = target.model.embed_tokens.weight.detach().numpy()
    if np.abs(bf16(torch.from_numpy(emb.astype(np.float32))).numpy() - e_file).max() > 0:
        raise SystemExit("the target fixture's embedding is not make_tiny_models' orbits")
    _, order = orbits(e_file.astype(np.float64), q)
    g = load_torch(str(TARGET / "golden.safetensors"))
    prompt = [int(x) for x in g["prompt"]]
    plain = [int(x) for x in g["greedy"]][:N_NEW]

    best = None
    for seed in range(100, 140):
        cfg = assistant_config(tcfg)
        assistant = Gemma4AssistantForCausalLM(cfg).eval().float()
        init_assistant(assistant, seed, emb, q, order, th)
        tokens, rounds, rows0, margins = golden(target, assistant, prompt)
        clear = float(np.mean(np.array(margins) >= CLEAR))
        if tokens != plain:
            raise SystemExit(f"seed {seed}: speculative greedy differs from the fixture's greedy tokens")
        kept = sum(r[3] for r in rounds)
        drafted = sum(r[1] for r in rounds)
        partial = sum(0 < r[3] < r[1] for r in rounds)
        print(f"seed {seed}: {len(rounds)} passes, kept {kept}/{drafted}, partial {partial}, "
              f"drafts with a clear margin {clear:.2f}", flush=True)
        if clear >= 0.9 and 0.2 <= kept / drafted <= 0.8 and partial >= 4:
            best = (seed, assistant, rounds, rows0, clear)
            break
    if best is None:
        raise SystemExit("no seed gave clear margins and a mixed acceptance")
    seed, assistant, rounds, rows0, clear = best
    hf_tokens, hf_rounds = transformers_loop(target, assistant, prompt)
    same = sum(1 for (p, d) in hf_rounds for r in rounds if r[0] == p and r[2] == d)

    OUT.mkdir(parents=True, exist_ok=True)
    assistant.to(torch.bfloat16).save_pretrained(str(OUT), safe_serialization=True)
    for extra in ("generation_config.json",):
        (OUT / extra).unlink(missing_ok=True)
    R = len(rounds)
    drafts = np.full((R, MTP_K), -1, np.int32)
    margins = np.zeros((R, MTP_K), np.float32)
    for i, r in enumerate(rounds):
        drafts[i, :r[1]] = r[2]
        margins[i, :r[1]] = r[4]
    meta = {"generated_by": "scripts/make_assistant_fixture.py",
            "peer": f"transformers {transformers.__version__} Gemma4AssistantForCausalLM, torch {torch.__version__}, "
                    "float32 CPU eager, bf16 weights",
            "target": target_name, "seed": str(seed), "mtp_k": str(MTP_K), "n_new": str(N_NEW),
            "clear_margin": f"{CLEAR}", "drafts_with_clear_margin": f"{clear:.3f}",
            "transformers_generate_tokens_equal": str(hf_tokens == [int(x) for x in g['greedy']][:N_NEW]),
            "transformers_generate_passes": str(len(hf_rounds)),
            "transformers_generate_passes_drafting_alike": str(same)}
    save_file({"prompt": np.array(prompt, np.int32),
               "tokens": np.array([int(x) for x in g["greedy"]][:N_NEW], np.int32),
               "round_pos": np.array([r[0] for r in rounds], np.int32),
               "round_k": np.array([r[1] for r in rounds], np.int32),
               "round_kept": np.array([r[3] for r in rounds], np.int32),
               "round_drafts": drafts,
               "round_margins": margins,
               "first_logits": rows0.numpy().astype(np.float32)},
              str(OUT / "golden.safetensors"), metadata=meta)
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
