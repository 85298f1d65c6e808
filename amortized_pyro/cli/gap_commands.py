"""The gap commands of the command line: ``gap`` (one run), ``gap-report`` (reports gathered into a table and a
figure) and ``capacity`` (fresh encoders on a frozen q(θ)); :mod:`amortized_pyro.cli.commands` adds them to its group."""
import json
from dataclasses import asdict
from pathlib import Path

import click

from amortized_pyro.autoguides.capacity import EncoderTraining
from amortized_pyro.cli.common import (OutPath, check_writable, comma_separated, device_option, friendly_errors,
                                       n_images_option, no_empty_out, overwrite_option, stderr_log, step_counts,
                                       threads_option)
from amortized_pyro.cli.options import settings_options
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.gap.capacity import sweep
from amortized_pyro.gap.measure import measure_run
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.settings import INT64_MAX
from amortized_pyro.report.tables import format_capacity, format_gap, format_reports
from amortized_pyro.runs.fit import check_finished, finished_run
from amortized_pyro.runs.layout import capacity_dir, gap_report_path
from amortized_pyro.runs.store import atomic_write, read_info, write_report
from amortized_pyro.study.results import load_gap_reports
from amortized_pyro.support.jsonio import read_jsonl


def fresh_encoder_options(command):
    """The options of the commands that train fresh encoders on a frozen q(θ) and measure their gaps: how an
    encoder trains (:class:`EncoderTraining`), the gap's settings, the device."""
    return settings_options(EncoderTraining, progress=False)(settings_options(GapSettings)(device_option(command)))


@click.command("gap")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False))
@click.option("--split", type=click.Choice(["train", "test"]), default="test", show_default=True,
              help="Measure on the run's training images or its held-out ones.")
@n_images_option(100, "N images of the split, drawn at random by the gap seed (--seed, plus the run's training seed unless --paired).")
@settings_options(GapSettings)
@click.option("--refine-steps", default="", callback=step_counts, help="Comma-separated step counts, e.g. "
              "0,5,20,100: the gap left after that many steps from the guide's factor.")
@device_option
@click.option("--out", "out_file", type=OutPath(dir_okay=False), default=None,
              help="Where to write the results (default: RUN_DIR/gap.json).")
@overwrite_option
@threads_option
@friendly_errors
def gap_command(run_dir, split, n_images, refine_steps, device, out_file, overwrite, progress, **settings):
    """Measure the amortization, coupling and approximation gaps of a finished run, per image, with standard
    errors: L_n(guide), L_n(q*), the best factor per θ draw, log p(x_n) by IWAE and by AIS, and their
    differences (they add up to log p(x_n) − L_n(guide))."""

    out_file = Path(out_file) if out_file else gap_report_path(run_dir)
    if out_file.exists() and not overwrite:
        raise AmortizedPyroError("%s exists: --overwrite to replace it, or --out another file" % out_file)
    check_finished(run_dir)  # both before the minutes of measuring
    check_writable(out_file)
    report = measure_run(run_dir, split, n_images, GapSettings(**settings), refine_steps, device, stderr_log, progress)
    write_report(out_file, report)
    click.echo(format_gap(report))
    click.echo("wrote %s" % out_file)


@click.command("gap-report")
@click.argument("folder", metavar="FOLDER", type=click.Path(file_okay=False, exists=True))
@threads_option
@friendly_errors
def gap_report_command(folder):
    """Gather the gap reports in FOLDER (the .json files `gap` writes, e.g. a run directory's gap.json, or a
    folder of them; other .json files there are passed over) into gap_summary.md and gap_figure.png."""
    from amortized_pyro.report.gap_figures import gap_figure

    reports = load_gap_reports(folder)
    table = format_reports(reports)
    (Path(folder) / "gap_summary.md").write_text(table + "\n")
    gap_figure(reports, Path(folder) / "gap_figure.png")
    click.echo(table)
    click.echo("wrote gap_summary.md and gap_figure.png into %s" % folder)


@click.command("capacity")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False))
@click.option("--widths", default="64,256,1024", show_default=True, callback=comma_separated(1, required=True),
              help="Comma-separated encoder widths.")
@click.option("--layers", "--depths", "layers", default="1,2,3", show_default=True,
              callback=comma_separated(1, required=True),
              help="Comma-separated numbers of hidden layers (--depths: its former name).")
@click.option("--seeds", default="0,1,2", show_default=True,
              callback=comma_separated(0, required=True, high=INT64_MAX),
              help="Comma-separated seeds of the encoders' initialisation and training draws.")
@n_images_option(100, "The gaps on N training and N test images drawn at random by the gap seed (--seed plus "
                      "the encoder's seed).")
@fresh_encoder_options
@click.option("--out", "out_dir", type=OutPath(file_okay=False), default=None,
              help="Folder for capacity.jsonl, capacity.md and capacity.png (default: RUN_DIR/capacity). "
                   "capacity.jsonl grows as encoders finish: the same command again continues the sweep.")
@overwrite_option
@threads_option
@friendly_errors
@no_empty_out("out_dir")
def capacity_command(run_dir, widths, layers, seeds, n_images, device, out_dir, overwrite, progress, **settings):
    """Cremer et al.'s protocol on a trained run: its q(θ) frozen, fresh encoders of every width × hidden layers ×
    seed trained to convergence on the frozen decoder, and their amortization gap on training and held-out
    images: does capacity close the gap when the decoder is fixed?"""
    training, gap_settings = (kind(**{k: v for k, v in settings.items() if k in kind.__dataclass_fields__})
                              for kind in (EncoderTraining, GapSettings))
    out = Path(out_dir) if out_dir else capacity_dir(run_dir)
    result, data = finished_run(run_dir, device, stderr_log)
    run_id, path = read_info(run_dir).get("run_id"), out / "capacity.jsonl"
    done = []
    if path.exists() and not overwrite:
        done = read_jsonl(path)
        if any((r.get("run_id"), r.get("requested_images"), r["training"]) != (run_id, n_images, asdict(training))
               or not gap_settings.same_as(r["settings"]) for r in done):
            raise AmortizedPyroError("%s holds a sweep of another run or other settings: --overwrite to replace "
                                     "it, or --out another folder" % path)
        stderr_log("continuing the sweep in %s (%d encoders done)" % (path, len(done) // 2))
    out.mkdir(parents=True, exist_ok=True)

    def save(rows):
        text = "".join(json.dumps(dict(r, run=str(run_dir), run_id=run_id, requested_images=n_images)) + "\n" for r in rows)
        atomic_write(path, lambda tmp: Path(tmp).write_text(text))

    rows = sweep(result, data, widths, layers, seeds, n_images, training.check(), gap_settings.check(), stderr_log,
                 done, save, progress)
    table = format_capacity(rows)
    (out / "capacity.md").write_text(table + "\n")
    from amortized_pyro.report.gap_figures import capacity_figure

    capacity_figure(rows, out / "capacity.png")
    click.echo(table)
    click.echo("wrote capacity.jsonl, capacity.md and capacity.png into %s" % out)


@click.command("held-out")
@click.argument("run_dirs", metavar="RUN_DIR...", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--widths", default="64,1024", show_default=True, callback=comma_separated(1, required=True),
              help="Comma-separated encoder widths; each trains on every --subsets size, on the training images "
                   "and on training plus held-out images.")
@click.option("--subsets", default="500,1000", show_default=True, callback=comma_separated(1),
              help="Comma-separated numbers of training images for encoders trained on a subset.")
@click.option("--regularized-widths", default="64", show_default=True, callback=comma_separated(1),
              help="Widths that also train with each --weight-decays value and with early stopping.")
@click.option("--weight-decays", default="0.01,0.1", show_default=True, callback=comma_separated(0, kind=float),
              help="Comma-separated AdamW decays of the regularized encoders' weight matrices.")
@click.option("--early-stopping", "early_stopping", default=3, show_default=True, type=click.IntRange(min=0),
              help="Early stopping: windows without a rise of the validation ELBO (a tenth of the training "
                   "images held out) before stopping (0: no early-stopping encoder).")
@n_images_option(20, "Images in each measured set (training, training unseen by subset encoders, held-out).")
@click.option("--refine-steps", default="5,20", show_default=True, callback=step_counts,
              help="Comma-separated step counts: the gap left after that many refinement steps (SA-VI at test "
                   "time) from every encoder.")
@fresh_encoder_options
@click.option("--out", "out_dir", type=OutPath(file_okay=False), required=True,
              help="Folder for held_out.jsonl, references.jsonl, held_out.md and the figures; the same command "
                   "again continues the study there.")
@threads_option
@friendly_errors
@no_empty_out("out_dir")
def held_out_command(run_dirs, widths, subsets, regularized_widths, weight_decays, early_stopping, n_images,
                     refine_steps, device, out_dir, progress, **settings):
    """Where the held-out amortization gap comes from: on each run's frozen q(θ), fresh encoders trained on
    subsets of its training images, on all of them, and on them plus the held-out images (transductive), some
    regularized; their gaps on training images, training images a subset encoder never saw, and held-out
    images, against one q* per image."""
    from amortized_pyro.gap.held_out import FreshEncoder, study

    training, gap_settings = (kind(**{k: v for k, v in settings.items() if k in kind.__dataclass_fields__})
                              for kind in (EncoderTraining, GapSettings))
    encoders = [FreshEncoder(w, n) for w in widths for n in subsets] + [FreshEncoder(w, t) for w in widths
                                                                   for t in ("train", "train+test")]
    encoders += [FreshEncoder(w, "train", "weight-decay", d) for w in regularized_widths for d in weight_decays]
    encoders += [FreshEncoder(w, "train", "early-stopping", early_stopping) for w in regularized_widths if early_stopping]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows_path, refs_path = out / "held_out.jsonl", out / "references.jsonl"
    rows = read_jsonl(rows_path) if rows_path.exists() else []
    references = {r["run"]: r for r in (read_jsonl(refs_path) if refs_path.exists() else [])}
    wanted = dict(training=asdict(training.check()), n_images=n_images, refine_steps=refine_steps)
    for r in list(references.values()):
        if {k: r[k] for k in wanted} != wanted or not gap_settings.check().same_as(r["settings"]):
            raise AmortizedPyroError("%s holds a study with other settings: --out another folder" % refs_path)

    def save(run, width, run_references, run_rows):
        references[run] = dict(wanted, settings=asdict(gap_settings), run=run, width=width, sets=run_references)
        rows[:] = [r for r in rows if r["run"] != run] + [dict(r, run=run) for r in run_rows]
        for path, items in ((refs_path, references.values()), (rows_path, rows)):
            text = "".join(json.dumps(item) + "\n" for item in items)
            atomic_write(path, lambda tmp, text=text: Path(tmp).write_text(text))

    for run_dir in run_dirs:
        result, data = finished_run(run_dir, device, stderr_log)
        run = str(run_dir)
        stderr_log("%s: %d fresh encoders" % (run, len(encoders)))
        study(result, data, encoders, training, gap_settings, n_images, refine_steps,
              references[run]["sets"] if run in references else None, [r for r in rows if r["run"] == run],
              lambda refs, new, run=run, width=result.config.width: save(run, width, refs, new), stderr_log, progress)
    from amortized_pyro.report.held_out import format_held_out, held_out_figures

    table = format_held_out(rows, list(references.values()))
    (out / "held_out.md").write_text(table + "\n")
    held_out_figures(rows, list(references.values()), out)
    click.echo(table)
    click.echo("wrote held_out.jsonl, references.jsonl, held_out.md and the figures into %s" % out)


@click.command("diagnose")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False))
@n_images_option(20, "N training and N test images, drawn by the gap seed (--seed plus the run's training seed: "
                     "the images `gap` measures with the same seed).")
@click.option("--samples", default=1000, show_default=True, type=click.IntRange(min=100),
              help="z draws per image and θ draw for k̂ (ArviZ's fit needs about 100 or more).")
@click.option("--theta-draws", default=4, show_default=True, type=click.IntRange(min=1),
              help="Draws of θ ~ q(θ); each image's k̂ is the mean over them.")
@click.option("--refine-steps", default="", callback=step_counts,
              help="Comma-separated step counts, e.g. 5,20: k̂ also of the factor after that many Adam steps.")
@click.option("--q-star/--no-q-star", default=False, show_default=True,
              help="Also k̂ of q*: the gap's optimization from the guide's factor (at most 2,000 steps per image).")
@click.option("--simulations", default=200, show_default=True, type=click.IntRange(min=0),
              help="Images simulated from the fitted model for the calibration check (0: none).")
@click.option("--sbc-draws", default=99, show_default=True, type=click.IntRange(min=1),
              help="Draws of q(z|x) each simulated image's true z is ranked among.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0, max=INT64_MAX),
              help="Seeds the images and every draw (plus the run's training seed).")
@device_option
@click.option("--out", "out_dir", type=OutPath(file_okay=False), default=None,
              help="Folder for diagnose.json, diagnose_khat.png and diagnose_ecdf.png (default: RUN_DIR).")
@overwrite_option
@threads_option
@friendly_errors
def diagnose_command(run_dir, n_images, samples, theta_draws, refine_steps, q_star, simulations, sbc_draws, seed,
                     device, out_dir, overwrite):
    """Per-image diagnostics of a finished run: the Pareto k̂ of the guide's importance weights (and of refined
    factors), and calibration through the encoder on images the fitted model simulates (ranks of the true z
    among draws of q(z|x), a uniformity test, ECDF plot)."""
    from amortized_pyro.gap.diagnose import diagnose_run
    from amortized_pyro.report.diagnostics import ecdf_figure, format_diagnosis, khat_figure

    out = Path(out_dir) if out_dir else Path(run_dir)
    path = out / "diagnose.json"
    if path.exists() and not overwrite:
        raise AmortizedPyroError("%s exists: --overwrite to replace it, or --out another folder" % path)
    check_finished(run_dir)  # both before the minutes of measuring
    out.mkdir(parents=True, exist_ok=True)
    check_writable(path)
    report = diagnose_run(run_dir, n_images, seed, samples, theta_draws, simulations, sbc_draws, refine_steps,
                          q_star=q_star, device=device, log=stderr_log)
    write_report(path, report)
    khat_figure(report, out / "diagnose_khat.png")
    if report["calibration"] is not None and report["calibration"]["p_value"] is not None:
        ecdf_figure(report["calibration"], out / "diagnose_ecdf.png")
    click.echo(format_diagnosis(report))
    click.echo("wrote %s and its figures" % path)


GAP_COMMANDS = (gap_command, gap_report_command, capacity_command, held_out_command, diagnose_command)
