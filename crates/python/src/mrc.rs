//! `mantle.mrc`: miss-ratio curves of any algorithm (`analyze::curves`), as
//! `mantle analyze --mrc` computes them, with the GIL released.

use crate::input::TraceInput;
use crate::{error, Stop};
use analyze::curves::{self, CurveOptions, Method, Unit};
use pyo3::prelude::*;
use units::CacheSize;

/// The curves as JSON text (`Curves`): `algorithms` by name, `sizes` as strings or numbers
/// (objects, bytes with a unit, percentages), `method` "exact" or "sampled".
#[pyfunction]
#[pyo3(signature = (trace, algorithms, sizes=None, points=curves::DEFAULT_POINTS, unit="objects", method="exact", sample_rate=curves::DEFAULT_SAMPLE_RATE, jobs=None, format=None))]
#[allow(clippy::too_many_arguments)]
pub fn mrc_json(
    py: Python<'_>,
    trace: &Bound<'_, PyAny>,
    algorithms: Vec<String>,
    sizes: Option<Vec<Bound<'_, PyAny>>>,
    points: usize,
    unit: &str,
    method: &str,
    sample_rate: f64,
    jobs: Option<usize>,
    format: Option<&str>,
) -> PyResult<String> {
    let input = TraceInput::from_py(trace, format)?;
    let algorithms = if algorithms.len() == 1 && algorithms[0] == "all" {
        cache::Algorithm::ALL
            .into_iter()
            .filter(|a| !a.is_offline())
            .collect()
    } else {
        algorithms
            .iter()
            .map(|a| crate::run::parse_algorithm(a))
            .collect::<PyResult<_>>()
            .map_err(|e| error(e.to_string().replacen("eviction:", "algorithms:", 1)))?
    };
    let sizes = sizes
        .unwrap_or_default()
        .iter()
        .map(|s| {
            let text = if let Ok(t) = s.extract::<String>() {
                t
            } else {
                s.str()?.to_string()
            };
            text.parse::<CacheSize>()
                .map_err(|e| error(format!("sizes: {e}")))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let unit = unit
        .parse::<Unit>()
        .map_err(|e| error(format!("unit: {e}")))?;
    let method = match method {
        "exact" => Method::Exact,
        "sampled" => Method::Sampled(sample_rate),
        other => {
            return Err(error(format!(
                "method: unknown method '{other}': expected exact or sampled"
            )))
        }
    };
    let options = CurveOptions {
        algorithms,
        sizes,
        points,
        unit,
        method,
        jobs: jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let json = py.detach(move || -> Result<String, Stop> {
        let open = || input.open();
        let curves = curves::miss_ratio_curves(&open, &options).map_err(Stop::Input)?;
        serde_json::to_string(&curves).map_err(|e| Stop::Input(e.to_string()))
    })?;
    Ok(json)
}
