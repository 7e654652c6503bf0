//! Ganesha's behaviour profiles (§4.1): `gmm_fit(k, m1, …, mN[, seed])` learns a mixture of k
//! Gaussians with equal priors by EM, seeded with the best (least distortion) of several K-means
//! runs; `gmm_classify(model, m1, …, mN)` labels a point with its most likely profile, or k
//! ("unknown") when it is far from even that one.
//!
//! Choices, documented in the functions' docs and the README:
//! - Diagonal covariances. With 14 sadc metrics a full covariance costs k·d² per point and
//!   iteration instead of k·d, which would not fit 1 M rows in the time budget, and the
//!   diagonal model still adapts each profile's spread per metric.
//! - Fitting happens in standardised units (each metric's mean 0, standard deviation 1 over the
//!   training rows), so K-means distances are not dominated by the metric with the largest unit
//!   (kB/s against %); the model is stored back in the metrics' own units.
//! - The accumulator keeps every training point (d·8 bytes per row) and sorts them before
//!   fitting, so the model depends on the set of rows only, not on how DataFusion split them
//!   across partitions. K-means runs on a sample of at most 20 000 rows; EM uses all rows.
//! - "Unknown": the squared Mahalanobis distance to the most likely component exceeds the
//!   0.999 quantile of the chi-square distribution with d degrees of freedom (what a point drawn
//!   from that component exceeds one time in a thousand), stored in the model as `max_d2`.
//!
//! Own code (~300 lines) rather than linfa-clustering: linfa's GMM brings ndarray, ndarray-rand,
//! linfa-linalg and their features into a crate that otherwise depends on DataFusion alone, has
//! no equal-prior option, and would need a conversion of every point into an ndarray matrix.

use std::mem::size_of;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, ListArray, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, Int64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunctionParams, WindowFunctionParams};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
    Volatility, aggregate_doc_sections::DOC_SECTION_STATISTICAL, scalar_doc_sections::DOC_SECTION_MATH,
    udaf_default_schema_name, udaf_default_window_function_schema_name,
};

use crate::args::{
    Literals, arg_error, arity_error, exec_error, f64_list_type, fixed_width_list, list_row, list_scalar,
    logical_literals, physical_literals, require_integer, require_number, scalar_or_array, to_f64, to_f64_list,
};

const MAX_K: usize = 256;
/// K-means restarts; the one with the least distortion seeds EM (Ganesha).
const KMEANS_RUNS: usize = 5;
const KMEANS_SAMPLE: usize = 20_000;
const KMEANS_MAX_ITERATIONS: usize = 100;
const EM_MAX_ITERATIONS: usize = 100;
/// EM stops when the mean log-likelihood per row improves by less than this.
const EM_TOLERANCE: f64 = 1e-7;
/// Variance floor in standardised units, so a profile of identical rows stays a density.
const VARIANCE_FLOOR: f64 = 1e-6;
/// The standard normal quantile of 0.999, for the chi-square quantile of the "unknown" floor.
const Z_999: f64 = 3.090_232_306_167_813_5;
const DEFAULT_SEED: u64 = 42;

/// SplitMix64: a small, well-mixed generator, enough for sampling and K-means++ seeding.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_f64() * n as f64) as usize % n.max(1)
    }
}

/// The chi-square quantile for `dof` degrees of freedom at the normal quantile `z`, by the
/// Wilson–Hilferty approximation (within 3 % for one degree of freedom, better above).
fn chi_square_quantile(dof: usize, z: f64) -> f64 {
    let c = 2.0 / (9.0 * dof as f64);
    dof as f64 * (1.0 - c + z * c.sqrt()).powi(3)
}

/// A fitted mixture: `means` and `variances` are k rows of `dims` values (diagonal
/// covariances); `max_d2` is the "unknown" floor on the squared Mahalanobis distance.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub k: usize,
    pub dims: usize,
    pub means: Vec<f64>,
    pub variances: Vec<f64>,
    pub max_d2: f64,
    pub rows: usize,
}

fn model_fields() -> Fields {
    Fields::from(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("dims", DataType::Int64, false),
        Field::new("means", f64_list_type(), false),
        Field::new("variances", f64_list_type(), false),
        Field::new("max_d2", DataType::Float64, false),
        Field::new("rows", DataType::Int64, false),
    ])
}

fn model_type() -> DataType {
    DataType::Struct(model_fields())
}

impl Model {
    fn to_scalar(&self) -> Result<ScalarValue> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![self.k as i64])),
            Arc::new(Int64Array::from(vec![self.dims as i64])),
            Arc::new(fixed_width_list(self.means.clone(), self.means.len(), 1)),
            Arc::new(fixed_width_list(self.variances.clone(), self.variances.len(), 1)),
            Arc::new(Float64Array::from(vec![self.max_d2])),
            Arc::new(Int64Array::from(vec![self.rows as i64])),
        ];
        Ok(ScalarValue::Struct(Arc::new(StructArray::try_new(model_fields(), columns, None)?)))
    }
}

/// One row of a model column, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ModelView<'a> {
    k: usize,
    dims: usize,
    rows: usize,
    means: &'a [f64],
    variances: &'a [f64],
    max_d2: f64,
}

impl ModelView<'_> {
    fn same_as(&self, m: &Model) -> bool {
        (self.k, self.dims, self.rows, self.max_d2) == (m.k, m.dims, m.rows, m.max_d2)
            && self.means == m.means.as_slice()
            && self.variances == m.variances.as_slice()
    }

    fn to_model(self) -> Model {
        Model {
            k: self.k,
            dims: self.dims,
            means: self.means.to_vec(),
            variances: self.variances.to_vec(),
            max_d2: self.max_d2,
            rows: self.rows,
        }
    }
}

/// The fields of a model column, cast once per batch so that reading a row allocates nothing.
struct ModelColumns<'a> {
    models: &'a StructArray,
    ints: [Int64Array; 3],
    means: ListArray,
    variances: ListArray,
    max_d2: Float64Array,
}

impl<'a> ModelColumns<'a> {
    const FUNC: &'static str = "gmm_classify";

    fn new(models: &'a StructArray) -> Result<Self> {
        let column = |name: &str| {
            models.column_by_name(name).ok_or_else(|| exec_error(Self::FUNC, format!("model has no field '{name}'")))
        };
        let int = |name: &str| -> Result<Int64Array> {
            Ok(datafusion::arrow::compute::cast(column(name)?, &DataType::Int64)?.as_primitive::<Int64Type>().clone())
        };
        let list = |name: &str| -> Result<ListArray> {
            let lists = to_f64_list(column(name)?)?;
            if lists.values().null_count() > 0 {
                return Err(exec_error(Self::FUNC, format!("model field '{name}' has NULL values")));
            }
            Ok(lists)
        };
        Ok(Self {
            models,
            ints: [int("k")?, int("dims")?, int("rows")?],
            means: list("means")?,
            variances: list("variances")?,
            max_d2: to_f64(column("max_d2")?)?,
        })
    }

    /// Row `row`'s model, `None` when the model is NULL; an error when it is malformed.
    fn view<'s>(&'s self, row: usize) -> Result<Option<ModelView<'s>>> {
        if self.models.is_null(row) {
            return Ok(None);
        }
        let [k, dims, rows] = self.ints.each_ref().map(|c| c.is_valid(row).then(|| c.value(row)).filter(|v| *v > 0));
        let (Some(k), Some(dims), Some(rows)) = (k, dims, rows) else {
            return Err(exec_error(Self::FUNC, "model fields k, dims and rows must be positive integers"));
        };
        let (k, dims) = (k as usize, dims as usize);
        let slice = |lists: &'s ListArray| -> &'s [f64] {
            let offsets = lists.value_offsets();
            let values = lists.values().as_primitive::<Float64Type>().values();
            &values[offsets[row] as usize..offsets[row + 1] as usize]
        };
        let (means, variances) = (slice(&self.means), slice(&self.variances));
        if means.len() != k * dims || variances.len() != k * dims {
            return Err(exec_error(
                Self::FUNC,
                format!("model means and variances must hold k * dims = {} values", k * dims),
            ));
        }
        if self.max_d2.is_null(row)
            || self.max_d2.value(row).is_nan()
            || variances.iter().any(|v| v.is_nan() || *v <= 0.0)
        {
            return Err(exec_error(Self::FUNC, "model has a NULL or NaN max_d2 or a non-positive variance"));
        }
        Ok(Some(ModelView { k, dims, rows: rows as usize, means, variances, max_d2: self.max_d2.value(row) }))
    }
}

/// A model prepared for labelling many points.
struct Classifier {
    k: usize,
    dims: usize,
    means: Vec<f64>,
    inv_variances: Vec<f64>,
    log_norms: Vec<f64>,
    max_d2: f64,
}

impl Classifier {
    fn new(m: &Model) -> Self {
        let log_norms = m.variances.chunks(m.dims).map(|v| -0.5 * v.iter().map(|v| v.ln()).sum::<f64>()).collect();
        Self {
            k: m.k,
            dims: m.dims,
            means: m.means.clone(),
            inv_variances: m.variances.iter().map(|v| 1.0 / v).collect(),
            log_norms,
            max_d2: m.max_d2,
        }
    }

    /// The most likely component (equal priors), or `k` when the point is farther from it than
    /// the model's `max_d2` (squared Mahalanobis distance).
    fn label(&self, x: &[f64]) -> usize {
        let (mut best, mut best_log_p, mut best_d2) = (0, f64::NEG_INFINITY, f64::INFINITY);
        for j in 0..self.k {
            let d2 = mahalanobis2(
                x,
                &self.means[j * self.dims..][..self.dims],
                &self.inv_variances[j * self.dims..][..self.dims],
            );
            let log_p = self.log_norms[j] - 0.5 * d2;
            if log_p > best_log_p {
                (best, best_log_p, best_d2) = (j, log_p, d2);
            }
        }
        if best_d2 <= self.max_d2 { best } else { self.k }
    }
}

#[inline]
fn mahalanobis2(x: &[f64], mean: &[f64], inv_var: &[f64]) -> f64 {
    x.iter().zip(mean).zip(inv_var).map(|((x, m), iv)| (x - m) * (x - m) * iv).sum()
}

#[inline]
fn squared_distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| (a - b) * (a - b)).sum()
}

/// Lloyd's K-means from K-means++ seeds on `points` (rows of `dims`); returns the centroids,
/// each point's cluster and the distortion (sum of squared distances).
fn kmeans(points: &[f64], dims: usize, k: usize, rng: &mut Rng) -> (Vec<f64>, Vec<usize>, f64) {
    let n = points.len() / dims;
    let row = |i: usize| &points[i * dims..(i + 1) * dims];
    let mut centroids = Vec::with_capacity(k * dims);
    centroids.extend_from_slice(row(rng.below(n)));
    let mut nearest: Vec<f64> = (0..n).map(|i| squared_distance(row(i), &centroids[..dims])).collect();
    for _ in 1..k {
        let total: f64 = nearest.iter().sum();
        let chosen = if total > 0.0 {
            let mut target = rng.next_f64() * total;
            nearest.iter().position(|&d| {
                target -= d;
                target < 0.0
            })
        } else {
            None
        }
        .unwrap_or_else(|| rng.below(n));
        let start = centroids.len();
        centroids.extend_from_slice(row(chosen));
        for (i, d) in nearest.iter_mut().enumerate() {
            *d = d.min(squared_distance(row(i), &centroids[start..]));
        }
    }
    let mut assignment = vec![usize::MAX; n];
    let mut distortion = 0.0;
    for _ in 0..KMEANS_MAX_ITERATIONS {
        let mut changed = false;
        distortion = 0.0;
        for (i, a) in assignment.iter_mut().enumerate() {
            let (j, d) = (0..k)
                .map(|j| (j, squared_distance(row(i), &centroids[j * dims..(j + 1) * dims])))
                .fold((0, f64::INFINITY), |best, c| if c.1 < best.1 { c } else { best });
            distortion += d;
            changed |= *a != j;
            *a = j;
        }
        if !changed {
            break;
        }
        let mut sums = vec![0.0; k * dims];
        let mut counts = vec![0usize; k];
        for (i, &j) in assignment.iter().enumerate() {
            counts[j] += 1;
            sums[j * dims..(j + 1) * dims].iter_mut().zip(row(i)).for_each(|(s, x)| *s += x);
        }
        for j in (0..k).filter(|&j| counts[j] > 0) {
            for d in 0..dims {
                centroids[j * dims + d] = sums[j * dims + d] / counts[j] as f64;
            }
        }
    }
    (centroids, assignment, distortion)
}

/// Fits the mixture to `points` (rows of `dims` finite values). `None` with fewer rows than
/// components.
pub fn fit(points: &[f64], dims: usize, k: usize, seed: u64) -> Option<Model> {
    if dims == 0 {
        return None;
    }
    let n = points.len() / dims;
    if n < k || n == 0 {
        return None;
    }
    let (points, centre, scale) = sorted_standardised(points, dims);

    // K-means on a sample, best of several runs.
    let mut rng = Rng::new(seed);
    let sample: Vec<f64> = if n <= KMEANS_SAMPLE {
        points.clone()
    } else {
        (0..KMEANS_SAMPLE).flat_map(|_| points[rng.below(n) * dims..][..dims].to_vec()).collect()
    };
    let (centroids, assignment, _) =
        (0..KMEANS_RUNS).map(|_| kmeans(&sample, dims, k, &mut rng)).min_by(|a, b| a.2.total_cmp(&b.2))?;

    // EM starts from the clusters' means and per-metric variances.
    let mut means = centroids;
    let mut variances = vec![1.0; k * dims];
    let mut counts = vec![0usize; k];
    let mut sq = vec![0.0; k * dims];
    for (i, &j) in assignment.iter().enumerate() {
        counts[j] += 1;
        for d in 0..dims {
            let dev = sample[i * dims + d] - means[j * dims + d];
            sq[j * dims + d] += dev * dev;
        }
    }
    for j in (0..k).filter(|&j| counts[j] >= 2) {
        for d in 0..dims {
            variances[j * dims + d] = sq[j * dims + d] / counts[j] as f64 + VARIANCE_FLOOR;
        }
    }

    em(&points, dims, k, &mut means, &mut variances);

    // Back to the metrics' own units.
    for j in 0..k {
        for d in 0..dims {
            means[j * dims + d] = means[j * dims + d] * scale[d] + centre[d];
            variances[j * dims + d] *= scale[d] * scale[d];
        }
    }
    Some(Model { k, dims, means, variances, max_d2: chi_square_quantile(dims, Z_999), rows: n })
}

/// The rows sorted (so that the fit does not depend on the order in which partitions delivered
/// them) and standardised, with each metric's mean and standard deviation.
fn sorted_standardised(points: &[f64], dims: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let n = points.len() / dims;
    let row = |i: usize| &points[i * dims..(i + 1) * dims];
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|&a, &b| {
        row(a).iter().zip(row(b)).map(|(x, y)| x.total_cmp(y)).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut sorted: Vec<f64> = order.iter().flat_map(|&i| row(i).iter().copied()).collect();
    let mut centre = vec![0.0; dims];
    let mut scale = vec![0.0; dims];
    for r in sorted.chunks_exact(dims) {
        centre.iter_mut().zip(r).for_each(|(c, x)| *c += x);
    }
    centre.iter_mut().for_each(|c| *c /= n as f64);
    for r in sorted.chunks_exact(dims) {
        scale.iter_mut().zip(r).zip(&centre).for_each(|((s, x), c)| *s += (x - c) * (x - c));
    }
    // A constant metric keeps unit scale: it cannot separate profiles, and must not divide by 0.
    scale.iter_mut().for_each(|s| *s = if *s > 0.0 { (*s / n as f64).sqrt() } else { 1.0 });
    for r in sorted.chunks_exact_mut(dims) {
        r.iter_mut().zip(&centre).zip(&scale).for_each(|((x, c), s)| *x = (*x - c) / s);
    }
    (sorted, centre, scale)
}

/// EM for a diagonal-covariance mixture with equal, fixed priors.
fn em(points: &[f64], dims: usize, k: usize, means: &mut [f64], variances: &mut [f64]) {
    let n = points.len() / dims;
    let mut previous = f64::NEG_INFINITY;
    let mut log_p = vec![0.0; k];
    for _ in 0..EM_MAX_ITERATIONS {
        let inv_var: Vec<f64> = variances.iter().map(|v| 1.0 / v).collect();
        let log_norm: Vec<f64> = variances.chunks(dims).map(|v| -0.5 * v.iter().map(|v| v.ln()).sum::<f64>()).collect();
        let mut weight = vec![0.0; k];
        let mut sum = vec![0.0; k * dims];
        let mut sum_sq = vec![0.0; k * dims];
        let mut log_likelihood = 0.0;
        for x in points.chunks_exact(dims) {
            for j in 0..k {
                log_p[j] =
                    log_norm[j] - 0.5 * mahalanobis2(x, &means[j * dims..][..dims], &inv_var[j * dims..][..dims]);
            }
            let top = log_p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = log_p
                .iter_mut()
                .map(|l| {
                    *l = (*l - top).exp();
                    *l
                })
                .sum();
            log_likelihood += top + total.ln();
            for j in 0..k {
                let r = log_p[j] / total;
                weight[j] += r;
                let (s, q) = (&mut sum[j * dims..][..dims], &mut sum_sq[j * dims..][..dims]);
                for d in 0..dims {
                    s[d] += r * x[d];
                    q[d] += r * x[d] * x[d];
                }
            }
        }
        for j in 0..k {
            // A component that lost all its rows keeps its parameters rather than dividing by 0.
            if weight[j] <= 1e-9 * n as f64 {
                continue;
            }
            for d in 0..dims {
                let mean = sum[j * dims + d] / weight[j];
                means[j * dims + d] = mean;
                variances[j * dims + d] = (sum_sq[j * dims + d] / weight[j] - mean * mean).max(0.0) + VARIANCE_FLOOR;
            }
        }
        let mean_log_likelihood = log_likelihood / n as f64;
        if (mean_log_likelihood - previous).abs() < EM_TOLERANCE {
            break;
        }
        previous = mean_log_likelihood;
    }
}

/// `gmm_fit`'s literal parameters; the metrics are the arguments between `k` and the seed.
#[derive(Debug, Clone, Copy)]
struct FitParams {
    k: usize,
    dims: usize,
    seed: u64,
}

impl FitParams {
    const FUNC: &'static str = "gmm_fit";

    fn parse(lits: &[Option<ScalarValue>]) -> Result<Self> {
        let l = Literals { func: Self::FUNC, lits };
        let k = l.positive_int(0, "k", MAX_K)?;
        // A trailing integer literal is the seed: a literal metric would be a constant column.
        let seeded = lits.len() >= 3 && matches!(lits.last(), Some(Some(v)) if v.data_type().is_integer());
        let seed = if seeded { l.integer(lits.len() - 1, "seed")? as u64 } else { DEFAULT_SEED };
        let dims = lits.len() - 1 - usize::from(seeded);
        if dims == 0 {
            return Err(arity_error(Self::FUNC, "k and at least one metric", lits.len()));
        }
        Ok(Self { k, dims, seed })
    }
}

/// Buffers the group's complete rows (see the module notes); `state` hands them over whole.
#[derive(Debug)]
struct GmmAccumulator {
    params: FitParams,
    points: Vec<f64>,
}

impl Accumulator for GmmAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let metrics = values[1..=self.params.dims].iter().map(to_f64).collect::<Result<Vec<_>>>()?;
        let rows = metrics.first().map_or(0, |m| m.len());
        for row in 0..rows {
            // Rows with a NULL, NaN or infinite metric are not observations of a profile.
            if metrics.iter().all(|m| m.is_valid(row) && m.value(row).is_finite()) {
                self.points.extend(metrics.iter().map(|m| m.value(row)));
            }
        }
        Ok(())
    }

    /// Leaves the rows in place: a window frame evaluates the same accumulator again.
    fn evaluate(&mut self) -> Result<ScalarValue> {
        match fit(&self.points, self.params.dims, self.params.k, self.params.seed) {
            Some(model) => model.to_scalar(),
            None => ScalarValue::try_from(&model_type()),
        }
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![list_scalar(std::mem::take(&mut self.points))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists = to_f64_list(&states[0])?;
        let mut scratch = Vec::new();
        for row in 0..lists.len() {
            if let Some(points) = list_row(&lists, row, &mut scratch) {
                if points.len() % self.params.dims != 0 {
                    return Err(exec_error(FitParams::FUNC, "partial state is not a whole number of rows"));
                }
                self.points.extend_from_slice(points);
            }
        }
        Ok(())
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.points.capacity() * size_of::<f64>()
    }
}

/// `gmm_fit(k, m1, …, mN[, seed])`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct GmmFit {
    signature: Signature,
}

impl Default for GmmFit {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

static GMM_FIT_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_STATISTICAL,
        "Ganesha's behaviour profiles: a mixture of k Gaussians with equal priors and diagonal \
         covariances, fitted to the rows (m1, …, mN) by EM seeded with the best of 5 K-means++ runs \
         (Ganesha §4.1), in standardised units. Returns a model struct `{k, dims, means, variances, \
         max_d2, rows}` (means and variances: k rows of N values, in the metrics' units) to store in a \
         table and pass to `gmm_classify`. Rows with a NULL, NaN or infinite metric are skipped; the \
         result is NULL when fewer rows than k remain. It depends only on the set of rows, not on \
         partitioning. The accumulator keeps every row (8 bytes per metric); K-means runs on a sample of \
         20 000 rows, EM on all.",
        "gmm_fit(k, m1, …, mN[, seed])",
    )
    .with_sql_example(concat!(
        "CREATE TABLE profiles AS\n",
        "SELECT gmm_fit(2, cpu, net) AS model\n",
        "FROM (VALUES (0, 0), (1, 0), (0, 1), (1, 1),\n",
        "             (100, 100), (101, 100), (100, 101), (101, 101)) AS v(cpu, net);\n",
        "SELECT model['k'], model['rows'] FROM profiles;\n",
        "-- 2 8"
    ))
    .with_argument("k", "Positive integer literal, at most 256: the number of profiles.")
    .with_argument("m1, …, mN", "Numeric columns: the metrics.")
    .with_argument("seed", "Optional: a trailing integer literal is the random seed (default 42).")
    .build()
});

impl AggregateUDFImpl for GmmFit {
    fn name(&self) -> &str {
        FitParams::FUNC
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        if t.len() < 2 {
            return Err(arity_error(FitParams::FUNC, "k and at least one metric", t.len()));
        }
        require_integer(FitParams::FUNC, 0, "k", &t[0])?;
        for (i, t) in t.iter().enumerate().skip(1) {
            require_number(FitParams::FUNC, i, "metric", t)?;
        }
        // Unchanged: a coerced seed would no longer be an integer literal; metrics are cast to
        // Float64 by the accumulator.
        Ok(t.to_vec())
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(model_type())
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        FitParams::parse(&logical_literals(&params.args))?;
        udaf_default_schema_name(self, params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        FitParams::parse(&logical_literals(&params.args))?;
        udaf_default_window_function_schema_name(self, params)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let params = FitParams::parse(&physical_literals(args.exprs))?;
        Ok(Box::new(GmmAccumulator { params, points: Vec::new() }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(format_state_name(args.name, "points"), f64_list_type(), true))])
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&GMM_FIT_DOC)
    }
}

/// `gmm_classify(model, m1, …, mN)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct GmmClassify {
    signature: Signature,
}

impl Default for GmmClassify {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

static GMM_CLASSIFY_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        DOC_SECTION_MATH,
        "The most likely component (profile 0 to k-1) of the row (m1, …, mN) under a `gmm_fit` model, or \
         k (\"unknown\") when its squared Mahalanobis distance to that component exceeds the model's \
         `max_d2`, the 0.999 quantile of chi-square with N degrees of freedom (Wilson–Hilferty), i.e. a \
         point such a profile would produce once in a thousand. NULL when the model or a metric is NULL \
         or NaN; an infinite metric is unknown.",
        "gmm_classify(model, m1, …, mN)",
    )
    .with_sql_example(concat!(
        "SELECT gmm_classify(p.model, 0.5, 0.5) = gmm_classify(p.model, 0, 1) AS same_profile,\n",
        "       gmm_classify(p.model, 50, 50) AS unknown\n",
        "FROM (SELECT gmm_fit(2, cpu, net) AS model\n",
        "      FROM (VALUES (0, 0), (1, 0), (0, 1), (1, 1),\n",
        "                   (100, 100), (101, 100), (100, 101), (101, 101)) AS v(cpu, net)) p;\n",
        "-- true 2"
    ))
    .with_argument("model", "A `gmm_fit` result.")
    .with_argument("m1, …, mN", "Numeric columns, as many as the model's `dims`, in the order used to fit.")
    .build()
});

impl ScalarUDFImpl for GmmClassify {
    fn name(&self) -> &str {
        "gmm_classify"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, t: &[DataType]) -> Result<Vec<DataType>> {
        if t.len() < 2 {
            return Err(arity_error(self.name(), "a model and at least one metric", t.len()));
        }
        match &t[0] {
            DataType::Struct(fields) if fields.find("means").is_some() => {}
            DataType::Null => {}
            other => return Err(arg_error(self.name(), 0, "model", format!("must be a gmm_fit model, got {other}"))),
        }
        let mut out = vec![t[0].clone()];
        for (i, t) in t.iter().enumerate().skip(1) {
            require_number(self.name(), i, "metric", t)?;
            out.push(DataType::Float64);
        }
        Ok(out)
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let models = match arrays[0].data_type() {
            DataType::Null => None,
            _ => Some(ModelColumns::new(
                arrays[0].as_struct_opt().ok_or_else(|| exec_error(self.name(), "model must be a struct"))?,
            )?),
        };
        let metrics = arrays[1..].iter().map(to_f64).collect::<Result<Vec<_>>>()?;
        // Usually every row carries the same model (a one-row table joined in): prepare it once
        // and reuse it while the rows' models are equal.
        let mut cached: Option<(Model, Classifier)> = None;
        let mut x = vec![0.0; metrics.len()];
        let mut out = Vec::with_capacity(arrays[0].len());
        for row in 0..arrays[0].len() {
            let Some(view) = models.as_ref().map(|m| m.view(row)).transpose()?.flatten() else {
                out.push(None);
                continue;
            };
            if view.dims != metrics.len() {
                return Err(exec_error(
                    self.name(),
                    format!("the model has {} metrics but {} were given", view.dims, metrics.len()),
                ));
            }
            if metrics.iter().any(|m| m.is_null(row) || m.value(row).is_nan()) {
                out.push(None);
                continue;
            }
            let classifier = match &cached {
                Some((model, classifier)) if view.same_as(model) => classifier,
                _ => {
                    let model = view.to_model();
                    let classifier = Classifier::new(&model);
                    &cached.insert((model, classifier)).1
                }
            };
            x.iter_mut().zip(&metrics).for_each(|(x, m)| *x = m.value(row));
            out.push(Some(classifier.label(&x) as i64));
        }
        scalar_or_array(&args.args, Arc::new(Int64Array::from(out)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&GMM_CLASSIFY_DOC)
    }
}

/// Draws `n` points around each of `centres` with standard deviation `sigma` (Box–Muller).
#[cfg(test)]
pub(crate) fn gaussian_clusters(centres: &[&[f64]], sigma: f64, n: usize, rng: &mut Rng) -> Vec<f64> {
    let mut out = Vec::new();
    for _ in 0..n {
        for centre in centres {
            for &c in *centre {
                let (u, v) = (1.0 - rng.next_f64(), rng.next_f64());
                out.push(c + sigma * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{ctx, query_err, strings};
    use datafusion::arrow::array::RecordBatch;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::datasource::MemTable;

    const CENTRES: [&[f64]; 3] = [&[0.0, 0.0], &[10.0, 0.0], &[0.0, 10.0]];

    #[test]
    fn chi_square_quantiles() {
        // Exact values (scipy.stats.chi2.ppf(0.999, d)): 10.828 for d = 1, 36.123 for d = 14.
        assert!((chi_square_quantile(1, Z_999) / 10.828 - 1.0).abs() < 0.035);
        assert!((chi_square_quantile(14, Z_999) / 36.123 - 1.0).abs() < 0.005);
    }

    #[test]
    fn recovers_three_separated_gaussians() {
        let mut rng = Rng::new(1);
        let points = gaussian_clusters(&CENTRES, 0.1, 3000, &mut rng);
        let model = fit(&points, 2, 3, 7).unwrap();
        let classifier = Classifier::new(&model);
        for centre in CENTRES {
            let j = classifier.label(centre);
            assert!(j < 3);
            let mean = &model.means[j * 2..j * 2 + 2];
            assert!(squared_distance(mean, centre).sqrt() < 1e-2, "{mean:?} vs {centre:?}");
            for v in &model.variances[j * 2..j * 2 + 2] {
                assert!((v.sqrt() - 0.1).abs() < 0.01, "standard deviation {}", v.sqrt());
            }
        }
        // Held-out points from the same clusters get their cluster's label; far points are unknown.
        let held_out = gaussian_clusters(&CENTRES, 0.1, 100, &mut rng);
        for (i, x) in held_out.chunks(2).enumerate() {
            assert_eq!(classifier.label(x), classifier.label(CENTRES[i % 3]));
        }
        assert_eq!(classifier.label(&[5.0, 5.0]), 3);
        assert_eq!(classifier.label(&[f64::INFINITY, 0.0]), 3);
    }

    #[test]
    fn too_few_rows_and_identical_rows() {
        assert_eq!(fit(&[1.0, 2.0], 1, 3, 0), None);
        let model = fit(&[1.0; 10], 1, 2, 0).unwrap();
        assert!(model.variances.iter().all(|v| *v > 0.0 && v.is_finite()));
        assert_eq!(Classifier::new(&model).label(&[1.0]), 0);
    }

    async fn points_ctx(partitions: usize) -> datafusion::prelude::SessionContext {
        let ctx = ctx(partitions);
        let mut rng = Rng::new(3);
        let points = gaussian_clusters(&CENTRES, 0.1, 2000, &mut rng);
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("y", DataType::Float64, true),
        ]));
        // Many small batches so that 8 partitions each see part of the rows.
        let batches: Vec<RecordBatch> = points
            .chunks(2 * 500)
            .map(|c| {
                let x: Float64Array = c.iter().step_by(2).copied().collect();
                let y: Float64Array = c.iter().skip(1).step_by(2).copied().collect();
                RecordBatch::try_new(schema.clone(), vec![Arc::new(x), Arc::new(y)]).unwrap()
            })
            .collect();
        let partitions: Vec<Vec<RecordBatch>> = batches.chunks(3).map(|c| c.to_vec()).collect();
        ctx.register_table("pts", Arc::new(MemTable::try_new(schema, partitions).unwrap())).unwrap();
        ctx
    }

    #[tokio::test]
    async fn sql_train_then_classify_same_with_1_and_8_partitions() {
        let mut models = Vec::new();
        for partitions in [1, 8] {
            let ctx = points_ctx(partitions).await;
            ctx.sql("CREATE TABLE m AS SELECT gmm_fit(3, x, y, 11) AS model FROM pts")
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            models.push(strings(&ctx, "SELECT model FROM m").await);
            let labels = strings(
                &ctx,
                "SELECT gmm_classify(m.model, x, y) AS l FROM (VALUES (0.05, 0.0), (10.0, 0.1), (-0.1, 9.9), \
                 (5.0, 5.0), (NULL, 1.0)) AS v(x, y), m",
            )
            .await;
            assert_eq!(labels.len(), 5);
            let distinct: std::collections::BTreeSet<&String> = labels[..3].iter().collect();
            assert_eq!(distinct.len(), 3, "{labels:?}");
            assert!(labels[..3].iter().all(|l| ["0", "1", "2"].contains(&l.as_str())));
            assert_eq!(labels[3..], ["3", "NULL"]);
        }
        assert_eq!(models[0], models[1]);
        let ctx = points_ctx(1).await;
        let err = query_err(&ctx, "SELECT gmm_fit(x, y) FROM pts").await;
        assert!(err.contains("gmm_fit: argument 1 (k) must be an integer"), "{err}");
        let err = query_err(&ctx, "SELECT gmm_fit(0, x, y) FROM pts").await;
        assert!(err.contains("gmm_fit: argument 1 (k) must be a positive integer literal"), "{err}");
        let err = query_err(&ctx, "SELECT gmm_classify(x, x) FROM pts").await;
        assert!(err.contains("gmm_classify: argument 1 (model) must be a gmm_fit model"), "{err}");
        let err = query_err(&ctx, "SELECT gmm_classify(m, x) FROM (SELECT gmm_fit(2, x, y) AS m FROM pts), pts").await;
        assert!(err.contains("gmm_classify: the model has 2 metrics but 1 were given"), "{err}");
    }
}
