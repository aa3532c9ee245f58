//! `mantle.analyze`: `analyze::Analyzer` over a trace, as `mantle analyze --json` reports it.

use crate::input::TraceInput;
use crate::{error, Signals, Stop};
use analyze::{AnalyzeOptions, Analyzer};
use pyo3::prelude::*;

/// Seconds from a number or a duration string as the CLI's `--window` and `--duration` take
/// it (`units::parse_duration`: "60", "60s", "5m", "500ms").
pub fn seconds(value: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    let secs = if let Ok(s) = value.extract::<String>() {
        units::parse_duration(&s)
            .map_err(|e| error(format!("{name}: {e}")))?
            .as_secs_f64()
    } else {
        value
            .extract::<f64>()
            .map_err(|_| error(format!("{name}: expected seconds or a duration string")))?
    };
    if secs.is_finite() && secs > 0.0 {
        Ok(secs)
    } else {
        Err(error(format!(
            "{name}: `{secs}` is not a positive duration (examples: 60s, 5m, 500ms)"
        )))
    }
}

/// The analysis of `trace` as JSON text (the GIL released while it runs).
#[pyfunction]
#[pyo3(signature = (trace, format=None, window=None, regimes=4, mrc_max_keys=1 << 22))]
pub fn analyze_json(
    py: Python<'_>,
    trace: &Bound<'_, PyAny>,
    format: Option<&str>,
    window: Option<&Bound<'_, PyAny>>,
    regimes: usize,
    mrc_max_keys: usize,
) -> PyResult<String> {
    let input = TraceInput::from_py(trace, format)?;
    let options = AnalyzeOptions {
        window_s: window
            .map(|w| seconds(w, "window"))
            .transpose()?
            .unwrap_or(60.0),
        regimes,
        mrc_max_keys,
        ..AnalyzeOptions::default()
    };
    let json = py.detach(move || -> Result<String, Stop> {
        let mut reader = trace::Batched::new(input.open()?);
        let mut analyzer = Analyzer::new(options);
        let mut signals = Signals::new();
        while let Some(request) = reader.next_request()? {
            signals.poll()?;
            analyzer.feed(&request);
        }
        serde_json::to_string(&analyzer.finish()).map_err(|e| Stop::Input(e.to_string()))
    })?;
    Ok(json)
}
