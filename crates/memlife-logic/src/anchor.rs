//! `memlife anchor`'s arithmetic (seed 004 "Temporal Continuity Anchor"): a user's profile
//! anchor is a unit embedding. Its first value, the origin, is the mean of the user's
//! narratives when it is first computed; after that each run moves the live anchor toward
//! the mean of the narratives written since the last run (`0.9 * live + 0.1 * new`, then
//! normalised), and measures its drift from the origin as cosine distance. Drift above the
//! warning threshold (0.2) or the critical one (0.4) is an event the job logs. The job reads
//! the narratives and the anchors table, plans with these and writes.

/// Seed 004's anchor settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnchorParams {
    /// The weight of the new narratives' mean in the live anchor.
    pub update_weight_new: f64,
    /// Drift from the origin above this is logged as a warning.
    pub drift_warning: f64,
    /// Drift from the origin above this is logged as critical.
    pub drift_critical: f64,
}

impl Default for AnchorParams {
    fn default() -> Self {
        AnchorParams {
            update_weight_new: 0.1,
            drift_warning: 0.2,
            drift_critical: 0.4,
        }
    }
}

impl AnchorParams {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.update_weight_new > 0.0 && self.update_weight_new <= 1.0) {
            return Err(format!(
                "anchor.update_weight_new is {}; it must be in (0, 1]",
                self.update_weight_new
            ));
        }
        if !(0.0 < self.drift_warning
            && self.drift_warning <= self.drift_critical
            && self.drift_critical <= 2.0)
        {
            return Err(format!(
                "anchor.drift_warning ({}) and drift_critical ({}) must satisfy 0 < warning <= critical <= 2",
                self.drift_warning, self.drift_critical
            ));
        }
        Ok(())
    }

    /// The drift event a drift is: `critical`, `warning`, or none.
    pub fn event(&self, drift: f64) -> Option<&'static str> {
        if drift > self.drift_critical {
            Some("critical")
        } else if drift > self.drift_warning {
            Some("warning")
        } else {
            None
        }
    }
}

/// The unit mean of `vectors` (`dim` wide, one after another); `None` when there are none or
/// they cancel out.
pub fn mean(vectors: &[f32], dim: usize) -> Option<Vec<f32>> {
    if dim == 0 || vectors.len() < dim {
        return None;
    }
    let mut sum = vec![0f64; dim];
    for v in vectors.chunks_exact(dim) {
        for (s, x) in sum.iter_mut().zip(v) {
            *s += *x as f64;
        }
    }
    unit(&sum)
}

fn unit(v: &[f64]) -> Option<Vec<f32>> {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if !(norm > 1e-12 && norm.is_finite()) {
        return None;
    }
    Some(v.iter().map(|x| (x / norm) as f32).collect())
}

/// Cosine distance (1 - cosine similarity) of two vectors; 1 when either is zero.
pub fn cosine_distance(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        return 1.0;
    }
    (1.0 - dot / (na * nb)).max(0.0)
}

/// The live anchor moved toward `new` (a unit mean): `(1 - w) * live + w * new`, normalised.
/// Opposite vectors that cancel out leave the live anchor as it was.
pub fn updated(live: &[f32], new: &[f32], weight_new: f64) -> Vec<f32> {
    let mixed: Vec<f64> = live
        .iter()
        .zip(new)
        .map(|(l, n)| (1.0 - weight_new) * *l as f64 + weight_new * *n as f64)
        .collect();
    unit(&mixed).unwrap_or_else(|| live.to_vec())
}

/// What one run does to a user's anchor.
#[derive(Debug, Clone, PartialEq)]
pub struct AnchorStep {
    pub origin: Vec<f32>,
    pub live: Vec<f32>,
    /// Cosine distance of the new live anchor from the origin.
    pub drift: f64,
    /// Cosine distance of the new live anchor from the one before (this cycle's move).
    pub moved: f64,
    pub event: Option<&'static str>,
    /// Whether this run set the origin (the user's first anchor).
    pub first: bool,
}

/// One run's step for a user: `previous` is the stored (origin, live) anchor, if any; `new`
/// the vectors of the narratives written since it was stored (`dim` wide). No previous
/// anchor: the origin and live anchor are the new narratives' mean. No new narrative: `None`.
pub fn step(
    previous: Option<(&[f32], &[f32])>,
    new: &[f32],
    dim: usize,
    p: &AnchorParams,
) -> Option<AnchorStep> {
    let fresh = mean(new, dim)?;
    let Some((origin, live)) = previous else {
        return Some(AnchorStep {
            origin: fresh.clone(),
            live: fresh,
            drift: 0.0,
            moved: 0.0,
            event: None,
            first: true,
        });
    };
    let next = updated(live, &fresh, p.update_weight_new);
    let drift = cosine_distance(&next, origin);
    Some(AnchorStep {
        origin: origin.to_vec(),
        moved: cosine_distance(&next, live),
        live: next,
        drift,
        event: p.event(drift),
        first: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn the_first_anchor_is_the_unit_mean_and_has_no_drift() {
        let s = step(None, &[2.0, 0.0, 0.0, 2.0], 2, &AnchorParams::default()).unwrap();
        let r = std::f32::consts::FRAC_1_SQRT_2;
        assert_eq!(s.origin, vec![r, r]);
        assert_eq!(s.live, s.origin);
        assert!(s.first && s.drift == 0.0 && s.event.is_none());
        assert!(step(None, &[], 2, &AnchorParams::default()).is_none());
        assert!(mean(&[1.0, 0.0, -1.0, 0.0], 2).is_none(), "cancelling out");
    }

    #[test]
    fn the_live_anchor_moves_a_tenth_of_the_way_and_drift_is_cosine_distance() {
        let origin = [1.0f32, 0.0];
        let p = AnchorParams::default();
        let s = step(Some((&origin, &origin)), &[0.0, 3.0], 2, &p).unwrap();
        // 0.9 * (1, 0) + 0.1 * (0, 1), normalised.
        let n = (0.81f64 + 0.01).sqrt();
        assert!(close(s.live[0] as f64, 0.9 / n) && close(s.live[1] as f64, 0.1 / n));
        assert!(close(s.drift, 1.0 - 0.9 / n), "{}", s.drift);
        assert!(close(s.moved, s.drift), "the first move is all the drift");
        assert!(!s.first);
        assert_eq!(s.event, None, "drift 0.006 is below the warning");
    }

    #[test]
    fn drift_past_the_thresholds_is_an_event_and_keeps_growing_with_steady_change() {
        let p = AnchorParams::default();
        let origin = [1.0f32, 0.0];
        let mut live = origin.to_vec();
        let mut events = Vec::new();
        let mut last = 0.0;
        for _ in 0..40 {
            let s = step(Some((&origin, &live)), &[0.0, 1.0], 2, &p).unwrap();
            assert!(s.drift >= last, "drift grows toward the new direction");
            last = s.drift;
            live = s.live;
            events.push(s.event);
        }
        let first_warning = events.iter().position(|e| *e == Some("warning")).unwrap();
        let first_critical = events.iter().position(|e| *e == Some("critical")).unwrap();
        assert!(first_warning < first_critical, "{events:?}");
        assert!(close(cosine_distance(&live, &origin), last));
        assert_eq!(p.event(0.2), None, "above, not at, the threshold");
        assert_eq!(p.event(0.41), Some("critical"));
    }

    #[test]
    fn settings_are_checked() {
        let p = AnchorParams::default();
        assert!(p.validate().is_ok());
        assert!(
            AnchorParams {
                update_weight_new: 0.0,
                ..p.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            AnchorParams {
                drift_warning: 0.5,
                ..p.clone()
            }
            .validate()
            .is_err()
        );
        assert_eq!(cosine_distance(&[0.0, 0.0], &[1.0, 0.0]), 1.0);
        assert_eq!(updated(&[1.0, 0.0], &[-1.0, 0.0], 0.5), vec![1.0, 0.0]);
    }
}
