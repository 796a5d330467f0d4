"""bench/results.json -> bench/RESULTS.md: a headline table, then each figure with its command."""

from __future__ import annotations

from typing import Any

from autotuner.cli.claim_report import gain_text, step_name
from autotuner.tuning.outcome import Confirmation, LadderStep, Outcome, Quality

CMD = "python -m bench.run --only {}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _f(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def _headline_scaling_emulated(se: dict[str, Any]) -> list[list[str]]:
    link = se["link"]
    rows = [["emulated inter-node link (plain all_to_all_single, 2 nodes)",
             f"{link['bytes_per_s_each_way'] / 1e6:,.0f} MB/s each way", f"set {link['rate']}",
             f"{link['ratio_to_rate']:.2f}x the rate", "within 10%", "met" if link["within_10pct"] else "missed"]]  # fmt: skip
    if curve := se["study"]["scaling"] or []:
        last = curve[-1]
        rows.append([f"scaling to {last['nodes']} emulated nodes (1 Gbit between them)",
                     f"tuned {_f(last['tuned_scaling'], '.2f')}x", f"baseline {_f(last['baseline_scaling'], '.2f')}x",
                     f"efficiency {_pct(last['tuned_efficiency'])} / {_pct(last['baseline_efficiency'])}", "-", "-"])  # fmt: skip
    return rows


def headline(s: dict[str, Any]) -> list[list[str]]:
    """(figure, ours, baseline, ratio, target, verdict) rows for what was measured."""
    rows = []
    if t := s.get("trial"):
        rows.append(["trial efficiency (measured share of wall)", _pct(t["ten_candidates"]["share"]),
                     _pct(t["single_candidate"]["share"]) + " (1 candidate)", f"{t['ratio']:.1f}x", ">= 60%",
                     "met" if t["ten_candidates"]["share"] >= 0.6 else "missed"])  # fmt: skip
    if n := s.get("noise"):
        rows.append(["measurement noise (CV of samples/s, 5 launches)", _pct(n["cv_median_statistic"]),
                     _pct(n["cv_mean_statistic"]) + " (mean statistic)",
                     f"{n['cv_median_statistic'] / n['cv_mean_statistic']:.2f}x", "<= 5%",
                     "met" if n["cv_median_statistic"] <= 0.05 else "missed"])  # fmt: skip
    if f := s.get("fidelity"):
        for row in f.values():
            if isinstance(row, dict) and "median_ratio" in row:
                rows.append([f"fidelity, {row['fabric']}", "trial algbw", "plain all_to_all_single",
                             f"{row['median_ratio']:.2f}x", ">= 0.9x",
                             "met" if row["median_ratio"] >= 0.9 else "missed"])  # fmt: skip
    for row in s.get("training-fidelity", {}).values():
        if isinstance(row, dict) and "rows" in row:
            rows.append([f"training fidelity, {row['fabric']}", "trial speedups", "training-loop speedups",
                         f"worst {row['worst_ratio_error']:.0%} off, Spearman {row['spearman']:.2f}",
                         "within 10%, Spearman >= 0.9",
                         "met" if row["worst_ratio_error"] <= 0.1 and row["spearman"] >= 0.9 else "missed"])  # fmt: skip
    if q := s.get("search"):
        tpe, rnd = q["tpe"], q["random"]
        rows.append([f"search: measurements to within 3% of grid best (k={q['candidates_per_launch']})",
                     f"{tpe['median']:.0f} ({tpe['median_fraction_of_grid']:.0%} of grid)",
                     f"random {rnd['median']:.0f}, grid {q['grid']['exhaustive']}",
                     f"{rnd['median'] / tpe['median']:.2f}x fewer than random", "<= 30% of grid, < random",
                     "met" if tpe["median_fraction_of_grid"] <= 0.3 and tpe["median"] < rnd["median"] else "missed"])  # fmt: skip
    if se := s.get("scaling-emulated"):
        rows += _headline_scaling_emulated(se)
    if pl := s.get("planning"):
        rows.append(["planning a launch (CPU, launch 1..50 of a replay study)", f"max {pl['max_ms']:.0f} ms",
                     f"first tenth {pl['first_tenth_ms']:.0f} ms, last {pl['last_tenth_ms']:.0f} ms",
                     f"{pl['trials_per_candidate']:.2f} Optuna trials per candidate", "<= 1 s, <= 1.5 trials",
                     "met" if pl["max_ms"] <= 1000 and pl["trials_per_candidate"] <= 1.5 else "missed"])  # fmt: skip
    if u := s.get("tuned"):
        for row in u["rows"]:
            rows.append([f"tuned vs default, {row['fabric']}", f"finalist {_speedup(row)}",
                         f"published {_f(row['published_speedup'], '.2f')}x", row["published"], "95% CI, ladder, quality",
                         "confirmed" if row.get("ci_low") and row["ci_low"] > 1 else "not significant"])  # fmt: skip
    if q := s.get("quality"):
        rows.append([f"convergence check cost (quality launch, demo tables, k={q['k']} paired seeds)",
                     f"{q['after_s']:.0f} s ({q['models']['after']} models)",
                     f"{q['before_s']:.0f} s ({q['models']['before']} models, one seed each)", f"{q['ratio']:.2f}x",
                     "demo total within 1.5x", "-"])  # fmt: skip
    if (rv := s.get("revalidate")) and (fin := rv["finalist_revalidation"]):
        rows.append(["re-validation of a published finalist (demo, 2 CPU ranks)", f"{fin['wall_s']:.0f} s, {fin['state']}",
                     f"its study {rv['study_s']:.0f} s", f"{fin['wall_s'] / rv['study_s']:.2f}x of the study",
                     "cheaper than the study", "met" if fin["wall_s"] < rv["study_s"] else "missed"])  # fmt: skip
    if v := {k: r for k, r in s.get("serving", {}).items() if isinstance(r, dict)}:
        rows += _headline_serving(v)
    return rows


def _headline_serving(v: dict[str, Any]) -> list[list[str]]:
    rows = []
    for n, run in v.items():
        fetch = run["fetch"]
        ok = fetch["requests_per_s"] >= 2000 and fetch["p99_ms"] <= 20 and fetch["non_2xx"] == 0
        rows.append([f"config fetch, 64 connections, {n} stored configs", f"{fetch['requests_per_s']:,.0f} req/s",
                     f"p50 {fetch['p50_ms']:.1f} ms", f"p99 {fetch['p99_ms']:.1f} ms",
                     ">= 2000 req/s, p99 <= 20 ms, 0 errors", "met" if ok else "missed"])  # fmt: skip
    run = v.get("10") or next(iter(v.values()))
    rows.append(["hook end to end, service up / down / hanging",
                 f"{run['hook_up']['median_ms']:.0f} ms", f"{run['hook_down_cached']['median_ms']:.0f} / "
                 f"{run['hook_hanging_cached']['median_ms']:.0f} ms", "-", "<= 300 ms up, <= 2 s down",
                 "met" if run["hook_up"]["median_ms"] <= 300 and run["hook_hanging_cached"]["max_ms"] <= 2000
                 else "missed"])  # fmt: skip
    return rows


def table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


HEADLINE_START, HEADLINE_END = "<!-- bench:headline -->", "<!-- /bench:headline -->"


def headline_table(results: dict[str, Any]) -> str:
    return table(["figure", "ours", "baseline", "ratio", "target", ""], headline(results["sections"]))


def splice_headline(readme: str, results: dict[str, Any]) -> str:
    """README.md with the text between the headline markers replaced by this run's table."""
    start, end = readme.find(HEADLINE_START), readme.find(HEADLINE_END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no {HEADLINE_START} ... {HEADLINE_END} block for the headline table")
    return readme[: start + len(HEADLINE_START)] + "\n" + headline_table(results) + "\n" + readme[end:]


def _md_trial(t: dict[str, Any]) -> list[str]:
    return ["## Trial efficiency", "", f"`{CMD.format('trial')}` — {t['spec']}. Wall time from outside "
              "(`torchrun` included).", "",
              table(["launch", "wall s", "setup s", "measured s", "measured share"], [
                  ["1 candidate", _f(t["single_candidate"]["wall_s"], ".1f"), _f(t["single_candidate"]["setup_s"], ".1f"),
                   _f(t["single_candidate"]["measured_s"], ".1f"), _pct(t["single_candidate"]["share"])],
                  ["10 candidates", _f(t["ten_candidates"]["wall_s"], ".1f"), _f(t["ten_candidates"]["setup_s"], ".1f"),
                   _f(t["ten_candidates"]["measured_s"], ".1f"), _pct(t["ten_candidates"]["share"])]]),
              "", f"All ten candidates ok: {t['ten_candidates']['all_ok']}; forward quantization error "
              + ", ".join(f"{k} {v:.2e}" for k, v in t["ten_candidates"]["quant_error_fwd"].items()) + ".", ""]  # fmt: skip


def _md_noise(n: dict[str, Any]) -> list[str]:
    return ["## Measurement noise", "", f"`{CMD.format('noise')}` — {n['setup']}.", "",
              "samples/s per launch (median iteration): " + ", ".join(f"{x:,.0f}" for x in n["samples_per_s"]) +
              f". Within a launch the iteration times vary with a CV of {n.get('cv_within_launch', 0):.0%}; "
              "across launches:", "",
              table(["statistic of the iteration times", "CV of samples/s across launches"], [
                  ["median (what the trial reports and the search optimises)", _pct(n["cv_median_statistic"])],
                  ["10th percentile", _pct(n.get("cv_p10_statistic"))],
                  ["mean", _pct(n["cv_mean_statistic"])]]), ""] + _noise_machine(n)  # fmt: skip


def _noise_machine(n: dict[str, Any]) -> list[str]:
    if "compute_cpu_ms" not in n:
        return []
    return [("The same work took the training thread " + ", ".join(f"{x:.1f}" for x in n["compute_cpu_ms"]) +
             f" ms of CPU time per step (median) in the five launches, a CV of {_pct(n['cv_compute_cpu_time'])}: "
             "the machine's own speed moves that much between launches. The hypervisor took " +
             ", ".join(_pct(x) for x in n["steal_share"]) + " of the CPUs (steal) while they ran."), ""]  # fmt: skip


def _md_fidelity(f: dict[str, Any]) -> list[str]:
    lines = ["## Fidelity", "", f"`{CMD.format('fidelity')}` — the trial's all-to-all bandwidth against a plain "
              "`all_to_all_single` loop replaying the same calls (dtype, sizes, splits) in the same launch, "
              "right after each candidate.", ""]  # fmt: skip
    for row in f.values():
        if isinstance(row, dict) and "rows" in row:
            lines += [f"{row['fabric']}:", "", table(["candidate", "trial algbw GB/s", "plain GB/s", "ratio"], [
                [r["candidate"], f"{r['trial_algbw_gbps']:.3f}", f"{r['raw_algbw_gbps']:.3f}", f"{r['ratio']:.2f}"]
                for r in row["rows"]]), ""]  # fmt: skip
    return lines


def _md_training_fidelity(tf: dict[str, Any]) -> list[str]:
    lines = ["## Training fidelity", "", f"`{CMD.format('training-fidelity')}` — the trial's predicted speedup "
              "over fp32 at the job's batch (512) against the speedup of a reference TorchRec training loop "
              "(`bench/training_loop.py`: DLRM, FUSED embeddings with Adagrad, dense Adagrad under DDP, "
              "`TrainPipelineSparseDist`, torchrec's public API only) on the demo job, 2 CPU ranks. Both take "
              "turns: a trial launch measures the five candidates 4 times over, each time in a shuffled order "
              "(warmup 5, 25 iterations), then a training launch trains the five models taking turns likewise "
              "(warmup 5, 25 timed steps); 3 such pairs of launches. Each turn's speedups are against the same "
              "turn's baseline; medians over the turns.", ""]  # fmt: skip
    for row in tf.values():
        if isinstance(row, dict) and "rows" in row:
            lines += [f"{row['fabric']} ({row['rounds']} turns; Spearman {row['spearman']:.2f}, worst ratio "
                      f"{row['worst_ratio_error']:.0%} off 1):", "",
                      table(["candidate", "trial (predicted)", "training loop (actual)", "predicted / actual"], [
                          [r["candidate"], f"{r['trial_speedup']:.2f}x", f"{r['training_speedup']:.2f}x",
                           f"{r['ratio']:.2f}"] for r in row["rows"]]), ""]  # fmt: skip
    return lines


def _md_search(q: dict[str, Any]) -> list[str]:
    return ["## Search efficiency", "", f"`{CMD.format('search')}` — replay of `{q['landscape']}` "
              f"({q['grid_points']} points recorded from real launches; {q['landscape_note']}), "
              f"{q['seeds']} seeds, cap k = {q['candidates_per_launch']} candidates per launch, budget "
              f"{q['budget_measurements']} measurements. Points within 3% of the best "
              f"({q['grid_best_samples_per_s']:,.0f} samples/s): {q['points_within_3pct']}. A study has found it when its pick (best "
              "observed so far) is truly within 3%; runs that never get there count as budget + 1.", "",
              table(["search", "median measurements", "IQR", "found within budget"], [
                  ["TPE (ours)", f"{q['tpe']['median']:.0f}", f"{q['tpe']['iqr'][0]:.0f}-{q['tpe']['iqr'][1]:.0f}",
                   f"{q['tpe']['found_within_budget']}/{q['tpe']['runs']}"],
                  ["random", f"{q['random']['median']:.0f}", f"{q['random']['iqr'][0]:.0f}-{q['random']['iqr'][1]:.0f}",
                   f"{q['random']['found_within_budget']}/{q['random']['runs']}"],
                  ["grid (exhaustive)", str(q["grid"]["exhaustive"]), "-", "-"],
                  ["grid (shuffled, expected)", f"{q['grid']['expected_shuffled']:.1f}", "-", "-"]]), ""]  # fmt: skip


def _md_planning(pl: dict[str, Any]) -> list[str]:
    per = pl["cpu_ms_per_launch"]
    tenth = max(1, len(per) // 10)
    groups = [(f"{i + 1}-{min(i + tenth, len(per))}", per[i : i + tenth]) for i in range(0, len(per), tenth)]
    return ["## Planning cost", "", f"`{CMD.format('planning')}` — {pl['setup']}. CPU time of planning each "
            "launch (asking the sampler, answering proposals of measured points from memory, filling up); "
            f"the study left {pl['optuna_trials']} Optuna trials for {pl['measured_candidates']} measured "
            f"candidates ({pl['trials_per_candidate']:.2f} per candidate).", "",
            table(["launches", "mean CPU ms to plan one"], [[g, f"{sum(v) / len(v):.1f}"] for g, v in groups]), ""]  # fmt: skip


def _md_planning_wide(pw: dict[str, Any]) -> list[str]:
    now, before = pw["now"], pw["before"]
    rows = [[str(i + 1), f"{n / 1000:.2f}", f"{b / 1000:.1f}", f"{b / n:.0f}x", f"{nc / 1000:.1f}", f"{bc / 1000:.1f}"]
            for i, (n, b, nc, bc) in enumerate(zip(now["cpu_ms_per_launch"], before["cpu_ms_per_launch"],
                                                   now["cycle_cpu_ms_per_launch"], before["cycle_cpu_ms_per_launch"], strict=True))]  # fmt: skip
    return ["## Planning cost of wide launches", "", f"`{CMD.format('planning-wide')}` — {pw['setup']}, in the same "
            "run. CPU seconds to plan each search launch, and to plan, store and learn it (the replay itself costs "
            f"nothing); both found the best point ({now['best_samples_per_s'][-1]:,.0f} samples/s).", "",
            table(["search launch", "plan s, now", "plan s, before", "before / now", "cycle s, now", "cycle s, before"],
                  rows), ""]  # fmt: skip


def _md_scaling_emulated(se: dict[str, Any]) -> list[str]:
    link, study = se["link"], se["study"]
    curve = study["scaling"] or []
    return ["## Scaling over emulated nodes", "", f"`{CMD.format('scaling-emulated')}` — {link['label']}; 1 rank per "
            "node (2 cores). First the link: a plain `all_to_all_single` between the two nodes "
            f"({link['bytes_per_call_each_way'] / 1e6:.1f} MB each way per call): "
            f"{link['bytes_per_s_each_way'] / 1e6:,.1f} MB/s each way, {link['ratio_to_rate']:.2f}x the set "
            f"{link['rate']} ({'within' if link['within_10pct'] else 'NOT within'} 10%). The fabric itself: plain TCP "
            f"both ways at once {link['tcp_ratio_to_rate']:.2f}x the rate each way, gloo one way "
            f"{link['gloo_one_way_ratio_to_rate']:.2f}x" + ("" if link["within_10pct"] else
            " — the link carries the rate both ways at once, gloo does not: sending both ways at once over the"
            " shaped link it gets about half of it each way, and that is what the trials' all-to-alls see") + ". Then a study of the dense demo "
            "job at 2 nodes (`autotuner tune --executor local --executor-option nodes=namespaces --nnodes 2 --nproc 1 "
            f"--fabric 1gbit --scaling-nodes 1,2`, {study['minutes']:.1f} min): {study['decision']}"
            + (f", {study['speedup']:.2f}x [{study['ci_low']:.2f}-{study['ci_high']:.2f}]" if study.get("ci_low") else "")
            + f"; namespaces left afterwards: {len(study['namespaces_left'])}.", "",
            table(["nodes", "baseline samples/s", "factor", "efficiency", "tuned samples/s", "factor", "efficiency"], [
                [str(p["nodes"]), _f(p["baseline_samples_per_s"]), _f(p["baseline_scaling"], ".2f"),
                 _pct(p["baseline_efficiency"]), _f(p["tuned_samples_per_s"]), _f(p["tuned_scaling"], ".2f"),
                 _pct(p["tuned_efficiency"])] for p in curve]), ""]  # fmt: skip


def _speedup(r: dict[str, Any]) -> str:
    return f"{r['speedup']:.2f}x" + (f" [{r['ci_low']:.2f}-{r['ci_high']:.2f}]" if r.get("ci_low") else "")


def _ladder(r: dict[str, Any]) -> str:
    steps = [LadderStep.model_validate(s) for s in r.get("ladder") or []]
    return (
        "; ".join(
            f"{step_name(s)} {gain_text(s)} {'kept' if s.kept else 'dropped'}" for s in steps if s.ci_low
        )
        or "-"
    )


def _quality(r: dict[str, Any]) -> str:
    q = Quality.model_validate(r.get("quality") or {})
    if q.delta is None:
        return q.skipped or "-"
    if q.ci_low is None:  # measured before the check had paired seeds
        refused = f"; refused {', '.join(q.refused)}" if q.refused else "; kept"
        return f"log loss {q.delta:+.4f} (seed noise {q.seed_noise:.4f}){refused}"
    left = [f"refused {', '.join(q.refused)}"] if q.refused else []
    left += [f"not resolved {', '.join(q.unresolved)}"] if q.unresolved else []
    return (f"log loss {q.delta:+.4f} [{q.ci_low:+.4f}, {q.ci_high:+.4f}] (k={q.k}, seed spread "
            f"{q.seed_spread:.4f}); {'; '.join(left) or 'passed'}")  # fmt: skip


def _md_quality(q: dict[str, Any]) -> list[str]:
    a = q["after"]
    rows = [[n, " ".join(f"{x:.4f}" for x in a["per_seed"][n]),
             *(["-", "-", "-"] if n == "baseline" else
               [f"{a['variants'][n]['delta']:+.4f} [{a['variants'][n]['ci_low']:+.4f}, {a['variants'][n]['ci_high']:+.4f}]",
                f"{a['paired_sd'][n]:.4f}", a["variants"][n]["equal_samples_verdict"]
                + (f" (k={a['variants'][n]['k_to_resolve']} would resolve it)" if a["variants"][n].get("k_to_resolve") else "")])]
            for n in a["per_seed"]]  # fmt: skip
    eff = a["batch_efficiency"]
    said = ("never within the budget" if eff.get("never") else
            f"{eff['efficiency']:.2f} [{eff['efficiency_ci'][0]:.2f}-{eff['efficiency_ci'][1]:.2f}] (samples to the "
            f"baseline's final log loss: {', '.join(f'{s:,.0f}' for s in eff['samples'])} of {q['samples']:,})")  # fmt: skip
    return ["## Convergence check", "", f"`{CMD.format('quality')}` — real 2-rank quality launches on the demo "
            f"tables ({q['samples']:,} samples a model), the launch the engine plans now ({q['models']['after']} "
            f"models: baseline, fp8/bf16 + batch 1024, each alone, under k={q['k']} paired seeds; the batch change "
            f"trained past the budget, {q['checkpoints']} held-out checkpoints a budget) against the one it planned "
            f"before ({q['models']['before']} models: one seed each and a second seed of the baseline), in turns "
            f"({len(q['wall_s']['after'])} each).", "",
            table(["launch", "models", "wall s (median)", "each run"],
                  [["before", str(q["models"]["before"]), f"{q['before_s']:.1f}", ", ".join(f"{x:.1f}" for x in q["wall_s"]["before"])],
                   ["now", str(q["models"]["after"]), f"{q['after_s']:.1f}", ", ".join(f"{x:.1f}" for x in q["wall_s"]["after"])]]),
            "", f"Cost now / before: **{q['ratio']:.2f}x** (training {a['train_s']:.1f} s and held-out scoring "
            f"{a['eval_s']:.1f} s over all models of the last launch, rank 0). What the last launch found "
            f"(baseline seed spread {a['seed_spread']:.4f}; paired delta vs the baseline, 95% CI over the seeds, "
            f"verdict at equal samples against {LIMIT}):", "",
            table(["variant", "log loss per seed", "delta [95% CI]", "paired sd", "verdict"], rows), "",
            f"Batch 1024's sample efficiency (baseline samples / its own, geometric mean over seeds, 95% CI): {said}. "
            "In a study this times the ladder's throughput gain for the batch step is its time-to-quality speedup.",
            ""]  # fmt: skip


LIMIT = 0.002


def _md_revalidate(r: dict[str, Any]) -> list[str]:
    def row(label: str, config: dict[str, Any], v: dict[str, Any]) -> list[str]:
        # a re-validation's look is a 97.5% interval (two looks together at 95%); older runs recorded none
        level = f" ({v['confidence'] * 100:g}%)" if v.get("confidence") else ""
        ci = f" [{v['ci_low']:.2f}-{v['ci_high']:.2f}]{level}" if v.get("ci_low") is not None else ""
        change = f"{config['precision']}, batch {config['batch_size']}" + "".join(
            f", {k}={x}" for k, x in config["env"].items()
        )
        return [f"{label} v{v['version']}", change, str(v.get("rounds") or "-"), f"{v['speedup']:.2f}x{ci}", v["state"],
                f"{v['wall_s']:.1f}", str(v["launches"])]  # fmt: skip

    return ["## Re-validation", "", f"`{CMD.format('revalidate')}` — the demo's study on 2 local CPU ranks "
            f"({r['study_s']:.0f} s), then `autotuner revalidate` of what it published, and of its finalist published "
            "as a version of its own (a config that changes something is re-checked in interleaved rounds against "
            "the study's baseline, with the study's executor settings):", "",
            table(["version", "setting", "rounds", "vs baseline [CI]", "result", "wall s", "launches"],
                  [row("published", r["published"], r["published_revalidation"]),
                   row("finalist", r["finalist"], r["finalist_revalidation"])]), "",
            f"Re-checking the baseline costs one launch; the finalist's re-validation costs "
            f"{r['finalist_revalidation']['wall_s'] / r['study_s']:.2f}x the study that found it.", ""]  # fmt: skip


def _md_tuned(u: dict[str, Any]) -> list[str]:
    return ["## Tuned vs default", "", f"`{CMD.format('tuned')}` — a real study per fabric (local executor, "
              "2 CPU ranks, `deploy/examples/`, the settings of `make demo`: 3 search launches x 4 candidates, "
              "30 iterations each); the finalist's speedup over the job's baseline in 6 interleaved rounds with "
              "its 95% CI, then the ladder (each knob group against the step before, 5 rounds) and the "
              "convergence check, and what was published.", "",
              table(["fabric", "baseline", "finalist", "finalist speedup [95% CI]", "ladder", "quality",
                     "published", "decision"], [
                  [r["fabric"], r["baseline"], r["best"], _speedup(r), _ladder(r), _quality(r),
                   f"{r['published']} ({_f(r['published_speedup'], '.2f')}x)", r["decision"]]
                  for r in u["rows"]]), ""]  # fmt: skip


def _md_serving(section: dict[str, Any]) -> list[str]:
    v = {k: r for k, r in section.items() if isinstance(r, dict)}
    if not v:
        return []
    return ["## Serving", "", f"`{CMD.format('serving')}` — `wrk` (a separate process) against a real "
              "`autotuner serve`, 64 connections for 10 s, while a study (replay executor) writes launches and "
              "trials; then the hook (`autotuner env --server`) end to end, up, down (cached config), and "
              "against a service that accepts connections but never answers.", "",
              table(["stored configs", "req/s", "p50 ms", "p99 ms", "errors", "trials written meanwhile",
                     "hook up ms", "hook down ms", "hook hanging ms"], [
                  [str(r["stored_configs"]), f"{r['fetch']['requests_per_s']:,.0f}", f"{r['fetch']['p50_ms']:.1f}",
                   f"{r['fetch']['p99_ms']:.1f}", str(r["fetch"]["non_2xx"] + r["fetch"]["socket_errors"]),
                   str(r["trials_written_during_load"]), f"{r['hook_up']['median_ms']:.0f}",
                   f"{r['hook_down_cached']['median_ms']:.0f}", f"{r['hook_hanging_cached']['median_ms']:.0f}"]
                  for r in v.values()]), ""]  # fmt: skip


def _md_store(c: dict[str, Any]) -> list[str]:
    few, many, ratio = c["configs_few"], c["configs_many"], c["configs_ratio"]
    listing = c["listing"]
    changes = [
        ("pin", "pin_ms"),
        ("unpin", "unpin_ms"),
        ("rollback", "rollback_ms"),
        ("history page of 10", "history_page_ms"),
    ]
    return ["## The store at scale", "", f"`{CMD.format('store')}` — SQLite, in process. One (cluster, workload, nodes) "
            f"with {c['versions']['few']} versions (the baseline) and with {c['versions']['many']:,}: what an operator's "
            "changes cost as versions pile up (median of 7 calls).", "",
            table(["change", f"{c['versions']['few']} versions ms", f"{c['versions']['many']:,} versions ms", "ratio"],
                  [[name, f"{few[k]:.1f}", f"{many[k]:.1f}", f"{ratio[k]:.2f}x"] for name, k in changes]), "",
            f"The studies listing over {listing['studies']} studies (a tenth measured, two of them running): a page of 5 "
            f"in {listing['page_5_statements']} SQL statements ({listing['page_5_ms']:.1f} ms), of 50 in "
            f"{listing['page_50_statements']} ({listing['page_50_ms']:.1f} ms), of 500 in {listing['page_500_statements']} "
            f"({listing['page_500_ms']:.1f} ms): {c['listing_statements_50_vs_5']:.2f}x the statements for 10x the page.",
            ""]  # fmt: skip


def _md_results(r: dict[str, Any]) -> list[str]:
    return ["## Reading a trial's result", "", f"`{CMD.format('results')}` — each file parsed in a fresh process: "
            "peak memory growth over the file's size, the product's `parse_result` against `json.loads` alone in the "
            "same run (the floor). A file of more objects and lists than a trial writes is refused before parsing.", "",
            table(["result", "MiB", "json.loads x", "parse_result x", "vs json.loads", "parse_result"],
                  [[row["case"], f"{row['bytes'] / 2**20:.0f}", f"{row['json_loads_x']:.1f}", f"{row['parse_result_x']:.1f}",
                    f"{row['ratio_vs_json_loads']:.2f}x", row["outcome"]] for row in r["rows"]]), ""]  # fmt: skip


def _md_scaling(c: dict[str, Any]) -> list[str]:
    lines = ["## How cost scales", "", f"`{CMD.format('scaling')}` — one fp16 candidate, batch 512.", "",
              table(["tables", "ranks", "wall s", "setup s", "iteration ms", "all-to-all ms", "a2a MB/iter"], [
                  [str(r["tables"]), str(r["ranks"]), f"{r['wall_s']:.1f}", f"{r['setup_s']:.1f}",
                   f"{r['iter_ms']:.1f}", f"{r['a2a_ms']:.2f}", f"{r['a2a_bytes_per_iter'] / 1e6:.2f}"]
                  for r in c["rows"]]), "",
              f"16 vs 4 tables: setup x{c['setup_ratio_16_vs_4_tables']:.2f}, iteration x"
              f"{c['iter_ratio_16_vs_4_tables']:.2f}; 2 vs 1 ranks: iteration x{c['iter_ratio_2_vs_1_ranks']:.2f}.", ""]  # fmt: skip
    return lines


# Each section's Markdown, in the order RESULTS.md shows them.
SECTION_MD = {"trial": _md_trial, "noise": _md_noise, "fidelity": _md_fidelity,
              "training-fidelity": _md_training_fidelity, "search": _md_search, "planning": _md_planning,
              "planning-wide": _md_planning_wide,
              "tuned": _md_tuned, "quality": _md_quality,
              "serving": _md_serving, "store": _md_store, "results": _md_results, "revalidate": _md_revalidate, "scaling": _md_scaling, "scaling-emulated": _md_scaling_emulated}  # fmt: skip


def _trial_rows(trial: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in trial["candidates"]:
        bd = c.get("breakdown_ms") or {}
        ratio = c.get("wire_vs_alone")
        rows.append([f"{c['fwd_precision']} {c['pipeline']}", _f(c.get("samples_per_s")),
                     f"{(c.get('iter_ms') or {}).get('median', 0):.2f}", f"{(c.get('a2a_ms') or {}).get('median', 0):.3f}",
                     f"{c.get('a2a_alone_ms', 0):.3f}", f"{ratio:.2f}x" if ratio else "-",
                     f"{bd.get('input_dist', 0):.2f}", f"{bd.get('dense_comm', 0):.2f}"])  # fmt: skip
    return rows


TRIAL_HEAD = [
    "candidate",
    "samples/s",
    "step ms",
    "a2a ms",
    "alone ms",
    "a2a / alone",
    "input dist ms",
    "dense ms",
]


def _md_gpu(g: dict[str, Any]) -> list[str]:
    """bench/out/gpu-check.json (`make gpu-check` on a lent GPU, committed by hand): what NCCL did in the loop."""
    runs = {r["run"]: r for r in g["runs"]}
    lines = ["## GPU check: NCCL in the loop", "", f"{g['label']}. `make gpu-check` (`python -m bench.gpu_check`); "
             f"{g['checks_passed']} of {g['checks_total']} checks passed over the runs, every verdict in "
             "bench/out/gpu-check.json. Two nodes are emulated on the one GPU (`nodes=hostids`: a torchrun agent "
             "and NCCL_HOSTID per node, NCCL's socket transport over loopback): emulation, not a cluster.", ""]  # fmt: skip
    sweep = runs[1]["phases"]["b"]["sweep"]
    sizes = sorted({int(k) for r in sweep for k in r["algbw_gbps_by_bytes"]})
    lines += [f"Plain all_to_all between the 2 nodes, algbw GB/s (run {1}, commit {runs[1]['commit']}); NCCL's report "
              "says what it took:", ""]  # fmt: skip
    lines.append(table(["setting", *(f"{s / 2**20:g} MiB" for s in sizes), "geomean", "NCCL took threads x sockets"],
                       [[r["setting"], *(f"{r['algbw_gbps_by_bytes'].get(str(s), r['algbw_gbps_by_bytes'].get(s, 0)):.2f}" for s in sizes),
                         f"{r['geomean_algbw_gbps']:.2f}",
                         f"{r['nccl_reported'].get('socket_nthreads')} x {r['nccl_reported'].get('socket_nsocks_perthread')}"]
                        for r in sweep]))  # fmt: skip
    lines.append("")
    for run, phase, what in ((1, "b", "the start on the issuing stream"), (2, "b", "NCCL's own events on its stream"),
                             (2, "b_under_mps", "NCCL's stream, both processes through CUDA MPS")):  # fmt: skip
        ph = runs.get(run, {}).get("phases", {}).get(phase)
        if not ph:
            continue
        trial = ph["trials"]["default"]
        lines += [f"The demo job on 2 nodes, NCCL's defaults, timed with {what} (run {run}, commit "
                  f"{runs[run]['commit']}); `alone`: the same calls replayed in a plain loop right after:", ""]  # fmt: skip
        lines += [table(TRIAL_HEAD, _trial_rows(trial)), ""]
    for run, r in sorted(runs.items()):  # runs after the three above: the all-to-all-bound job's wire check
        for phase, ph in sorted(r.get("phases", {}).items()):
            trial = (ph.get("trials") or {}).get("a2a-bound") if phase.startswith("b") else None
            if trial:
                lines += [f"The all-to-all-bound job on 2 nodes ({trial['job']}), NCCL's defaults, phase {phase} "
                          f"(run {run}, commit {r['commit']}); its wire times checked against the calls alone "
                          f"(within 20%):", "", table(TRIAL_HEAD, _trial_rows(trial)), ""]  # fmt: skip
    for run in (1, 2, 3):
        c = runs.get(run, {}).get("phases", {}).get("c")
        if not c:
            continue
        o = Outcome.load(c.get("outcome")) or Outcome()
        fin: Confirmation = o.finalist or o
        ladder = "; ".join(f"{step_name(st)} {st.verdict} {gain_text(st)}" for st in o.ladder or [])
        lines.append(f"- Study (run {run}, commit {runs[run]['commit']}, {c['wall_s']:.0f} s, "
                     f"{len(c.get('launches', []))} launches): {o.decision}; "
                     + (f"finalist {fin.speedup:.2f}x [{fin.ci_low:.2f}-{fin.ci_high:.2f}], " if fin.ci_low is not None else "")
                     + f"published env {c['published']['env']}" + (f"; ladder: {ladder}" if ladder else "") + ".")  # fmt: skip
    lines += [""] + [f"- Run {r['run']}: {r['note']}" for r in g["runs"] if r.get("note")] + [""]
    return lines


def render(results: dict[str, Any], gpu: dict[str, Any] | None = None) -> str:
    s = results["sections"]
    m = results.get("machine", {})
    lines = [
        "# Benchmark results",
        "",
        f"Measured with `make bench` (`python -m bench.run`) on {m.get('cpu', '?')}, {m.get('cores', '?')} cores, "
        f"Python {m.get('python', '?')}; "
        + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
        + ".",
        "This machine is shared and noisy: every figure is a ratio against a baseline measured in the same run;",
        "absolute numbers are context. CPU ranks talk over gloo: NCCL variables are recorded but change nothing",
        "here, so shapes come from what is real on CPU (precision, batch size, sharding, threads) and from",
        "emulated fabrics (a rate-limited loopback in a network namespace), which are labelled as emulation.",
        "",
        headline_table(results),
        "",
    ]
    for key, section_md in SECTION_MD.items():
        if s.get(key):
            lines += section_md(s[key])
    if gpu:
        lines += _md_gpu(gpu)
    # Sections can be re-run alone (--only): the whole bench costs the sum of their last runs.
    total = sum(sec.get("seconds", 0) for sec in s.values())
    when = sorted(sec["measured_at"] for sec in s.values() if "measured_at" in sec)
    span = f" (sections measured {when[0]} to {when[-1]})" if when else ""
    lines += [f"Total bench time: {total / 60:.1f} min, the sum of each section's last run{span}.", ""]
    return "\n".join(lines)
