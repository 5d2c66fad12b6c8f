//! Evaluation and recommendation of a [`FactorModel`] (strads-mf, ps-mf).

use super::*;

/// A `(user, item, rating)` line of a ratings file, ids as written.
pub type LabelledRating = (String, String, Option<f32>);

impl FactorModel {
    /// The user and item indices by id.
    pub fn index(&self) -> FactorIndex {
        let map = |ids: &[String]| {
            ids.iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), i))
                .collect()
        };
        FactorIndex {
            users: map(&self.user_ids),
            items: map(&self.item_ids),
        }
    }

    /// The predicted rating of dense user `u` and item `i` (`None`: unknown, adds nothing).
    pub fn predict_indexed(&self, u: Option<usize>, i: Option<usize>) -> f64 {
        let bias = |b: &[f32], x: Option<usize>| x.and_then(|x| b.get(x)).map_or(0.0, |&v| v);
        let dot = match (u, i) {
            (Some(u), Some(i)) => self.user_factors[u]
                .iter()
                .zip(&self.item_factors[i])
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum(),
            _ => 0.0,
        };
        f64::from(self.global_mean)
            + f64::from(bias(&self.user_bias, u))
            + f64::from(bias(&self.item_bias, i))
            + dot
    }

    /// The predicted rating of `user` for `item` (ids as in the training file).
    pub fn predict(&self, index: &FactorIndex, user: &str, item: &str) -> f64 {
        self.predict_indexed(
            index.users.get(user).copied(),
            index.items.get(item).copied(),
        )
    }

    /// Held-out `rmse`, `mae`, `baseline_rmse` (predicting these ratings' mean) and how many
    /// pairs had an unknown user or item.
    pub fn evaluate(&self, ratings: &[LabelledRating], path: &Path) -> Result<Figures, MlError> {
        let index = self.index();
        let (mut sse, mut sae, mut unknown) = (0.0f64, 0.0f64, 0usize);
        let mut truth = Vec::with_capacity(ratings.len());
        for (line, (user, item, rating)) in ratings.iter().enumerate() {
            let r = rating.ok_or_else(|| {
                let why = format!(
                    "pair {} ({user}, {item}) has no rating to evaluate",
                    line + 1
                );
                MlError::does_not_fit(path, why)
            })?;
            let (u, i) = (index.users.get(user), index.items.get(item));
            unknown += usize::from(u.is_none() || i.is_none());
            let e = f64::from(r) - self.predict_indexed(u.copied(), i.copied());
            sse += e * e;
            sae += e.abs();
            truth.push(f64::from(r));
        }
        let n = ratings.len().max(1) as f64;
        let mean = truth.iter().sum::<f64>() / n;
        let baseline = truth.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
        Ok(vec![
            ("rmse", (sse / n).sqrt()),
            ("mae", sae / n),
            ("baseline_rmse", baseline.sqrt()),
            ("ratings", ratings.len() as f64),
            ("unknown_pairs", unknown as f64),
        ])
    }

    /// The pairs whose user or item the model never saw.
    pub fn unseen(&self, pairs: &[LabelledRating]) -> Unseen {
        let index = self.index();
        let n = pairs
            .iter()
            .filter(|(u, i, _)| !index.users.contains_key(u) || !index.items.contains_key(i))
            .count();
        Unseen {
            entries: n,
            records: n,
            reason: format!(
                "{n} of {} pair(s) have a user or item the model never saw; predicted \
                 without its factors and bias",
                pairs.len()
            ),
        }
    }

    /// The `top` items with the highest predicted rating for `user`, best first, but `exclude`.
    pub fn recommend(
        &self,
        user: &str,
        top: usize,
        exclude: &std::collections::HashSet<String>,
    ) -> Result<Vec<(String, f64)>, MlError> {
        let index = self.index();
        let u = *index
            .users
            .get(user)
            .ok_or_else(|| MlError::UnknownUser(user.into()))?;
        let mut scored: Vec<(String, f64)> = self
            .item_ids
            .iter()
            .enumerate()
            .filter(|(_, id)| !exclude.contains(*id))
            .map(|(i, id)| (id.clone(), self.predict_indexed(Some(u), Some(i))))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        scored.truncate(top);
        Ok(scored)
    }
}

/// Dense indices of a [`FactorModel`]'s ids.
#[derive(Debug, Clone)]
pub struct FactorIndex {
    /// User id -> row.
    pub users: HashMap<String, usize>,
    /// Item id -> row.
    pub items: HashMap<String, usize>,
}
