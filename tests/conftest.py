"""Suite-wide test settings: hypothesis runs without deadlines or the too-slow health check,
because CI machines are shared and slow generation there is noise, not a defect."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "runfold", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("runfold")
