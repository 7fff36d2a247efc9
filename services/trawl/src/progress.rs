//! Progress of a run: a bar on a terminal, a log line every few seconds otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use trawl_core::model::JobCounts;

pub enum Progress {
    Bar(ProgressBar),
    Lines {
        last: Option<Instant>,
        every: Duration,
    },
    Quiet,
}

fn line(c: &JobCounts) -> String {
    format!(
        "slices {}/{} done ({} failed) · items {} valid, {} rejected · cost {} · upstream {} · cache hits {}",
        c.slices_succeeded + c.slices_failed,
        c.slices_total,
        c.slices_failed,
        c.items_valid,
        c.items_rejected,
        c.cost,
        c.upstream_calls,
        c.cache_hits
    )
}

impl Progress {
    /// A bar when stderr is a terminal, log lines otherwise.
    pub fn for_stderr() -> Progress {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:24} {pos}/{len} {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            Progress::Bar(bar)
        } else {
            Progress::Lines {
                last: None,
                every: Duration::from_secs(2),
            }
        }
    }

    pub fn update(&mut self, c: &JobCounts) {
        match self {
            Progress::Bar(bar) => {
                bar.set_length(c.slices_total);
                bar.set_position(c.slices_succeeded + c.slices_failed);
                bar.set_message(format!(
                    "failed {} · items {}✓ {}✗ · {} · cache hits {}",
                    c.slices_failed, c.items_valid, c.items_rejected, c.cost, c.cache_hits
                ));
            }
            Progress::Lines { last, every } => {
                if last.is_none_or(|t| t.elapsed() >= *every) {
                    *last = Some(Instant::now());
                    eprintln!("progress: {}", line(c));
                }
            }
            Progress::Quiet => {}
        }
    }

    pub fn finish(&mut self, c: &JobCounts) {
        match self {
            Progress::Bar(bar) => {
                bar.finish_and_clear();
                eprintln!("progress: {}", line(c));
            }
            Progress::Lines { .. } => eprintln!("progress: {}", line(c)),
            Progress::Quiet => {}
        }
    }
}
