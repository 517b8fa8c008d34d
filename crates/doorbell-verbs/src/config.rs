//! The provider's tunables, read from the same environment variables as
//! rdma-core's mlx5 provider (mlx5 reference §3.1, §3.5).

use crate::VerbsError;

/// Below this many medium bfregs the provider raises the low-latency count
/// (MLX5_MED_BFREGS_TSHOLD).
const MED_BFREGS_TSHOLD: u32 = 12;

/// Provider settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// `MLX5_TOTAL_UUARS`: static bfregs to ask for (default 16).
    pub total_uuars: u32,
    /// `MLX5_NUM_LOW_LAT_UUARS`: of which dedicated (default 4).
    pub low_lat_uuars: u32,
    /// `MLX5_SHUT_UP_BF`: never use BlueFlame.
    pub shut_up_bf: bool,
    /// `MLX5_POST_SEND_PREFER_BF`: BlueFlame for any small single WQE, not
    /// only inline ones (default on).
    pub prefer_bf: bool,
    /// `MLX5_SINGLE_THREADED`: no locks on shared bfregs.
    pub single_threaded: bool,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            total_uuars: 16,
            low_lat_uuars: 4,
            shut_up_bf: false,
            prefer_bf: true,
            single_threaded: false,
        }
    }
}

impl ProviderConfig {
    /// Reads the `MLX5_*` variables, with the provider's defaults.
    pub fn from_env() -> Result<Self, VerbsError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`ProviderConfig::from_env`], reading variables through `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, VerbsError> {
        let num = |name: &'static str, default: i64| -> Result<i64, VerbsError> {
            match get(name) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| VerbsError::BadEnv { name, value: v }),
            }
        };
        let d = Self::default();
        let total = num("MLX5_TOTAL_UUARS", d.total_uuars.into())?;
        let low = num("MLX5_NUM_LOW_LAT_UUARS", d.low_lat_uuars.into())?;
        let cfg = Self {
            total_uuars: u32::try_from(total).map_err(|_| VerbsError::BadEnv {
                name: "MLX5_TOTAL_UUARS",
                value: total.to_string(),
            })?,
            low_lat_uuars: u32::try_from(low).map_err(|_| VerbsError::BadEnv {
                name: "MLX5_NUM_LOW_LAT_UUARS",
                value: low.to_string(),
            })?,
            shut_up_bf: get("MLX5_SHUT_UP_BF").is_some_and(|v| v.trim() != "0"),
            prefer_bf: get("MLX5_POST_SEND_PREFER_BF").is_none_or(|v| v.trim() != "0"),
            single_threaded: get("MLX5_SINGLE_THREADED").is_some_and(|v| v.trim() == "1"),
        };
        cfg.normalised()?;
        Ok(cfg)
    }

    /// The `(total, low_latency)` bfreg request after the provider's
    /// adjustments: at least 2 and even, at most 512; low latency raised to
    /// `total − 12` and at most `total − 1`.
    pub fn normalised(&self) -> Result<(u32, u32), VerbsError> {
        let bad_total = || VerbsError::BadEnv {
            name: "MLX5_TOTAL_UUARS",
            value: self.total_uuars.to_string(),
        };
        if self.total_uuars < 1 {
            return Err(bad_total());
        }
        let total = self.total_uuars.max(2).div_ceil(2) * 2;
        if total > 512 {
            return Err(bad_total());
        }
        let low = self
            .low_lat_uuars
            .max(total.saturating_sub(MED_BFREGS_TSHOLD));
        if low > total - 1 {
            return Err(VerbsError::BadEnv {
                name: "MLX5_NUM_LOW_LAT_UUARS",
                value: self.low_lat_uuars.to_string(),
            });
        }
        Ok((total, low))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<ProviderConfig, VerbsError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        ProviderConfig::from_lookup(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults() {
        let c = with(&[]).unwrap();
        assert_eq!(c.normalised().unwrap(), (16, 4));
        assert!(c.prefer_bf && !c.shut_up_bf && !c.single_threaded);
    }

    #[test]
    fn adjustments_follow_the_provider() {
        assert_eq!(
            with(&[("MLX5_TOTAL_UUARS", "7")])
                .unwrap()
                .normalised()
                .unwrap(),
            (8, 4)
        );
        // 32 total: low latency raised to 32 - 12 = 20.
        assert_eq!(
            with(&[("MLX5_TOTAL_UUARS", "32")])
                .unwrap()
                .normalised()
                .unwrap(),
            (32, 20)
        );
        assert_eq!(
            with(&[("MLX5_TOTAL_UUARS", "1"), ("MLX5_NUM_LOW_LAT_UUARS", "0")])
                .unwrap()
                .normalised()
                .unwrap(),
            (2, 0)
        );
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(with(&[("MLX5_TOTAL_UUARS", "0")]).is_err());
        assert!(with(&[("MLX5_TOTAL_UUARS", "600")]).is_err());
        assert!(with(&[("MLX5_TOTAL_UUARS", "lots")]).is_err());
        assert!(with(&[("MLX5_NUM_LOW_LAT_UUARS", "16")]).is_err());
        assert!(with(&[("MLX5_NUM_LOW_LAT_UUARS", "-1")]).is_err());
    }

    #[test]
    fn flags() {
        let c = with(&[
            ("MLX5_SHUT_UP_BF", "1"),
            ("MLX5_POST_SEND_PREFER_BF", "0"),
            ("MLX5_SINGLE_THREADED", "1"),
        ])
        .unwrap();
        assert!(c.shut_up_bf && !c.prefer_bf && c.single_threaded);
        assert!(!with(&[("MLX5_SHUT_UP_BF", "0")]).unwrap().shut_up_bf);
    }
}
