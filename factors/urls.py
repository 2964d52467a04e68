"""Routes of the CO2 calculator: the interactive API under ``/v1/`` and the operators'
bulk endpoints under ``/sync/`` (the addresses existing clients already call)."""

from __future__ import annotations

from django.urls import path

from factors import api, sync_api

MODULE = "v1/carbon_reports/<int:report>/modules/<str:module>"

urlpatterns = [
    path("v1/carbon_reports", api.ReportList.as_view(), name="factors-reports"),
    path("v1/carbon_reports/<int:report>", api.ReportDetail.as_view(), name="factors-report"),
    path(MODULE, api.ModuleDetail.as_view(), name="factors-module"),
    path(f"{MODULE}/data-entries", api.EntryList.as_view(), name="factors-entries"),
    path(f"{MODULE}/data-entries/<int:entry>", api.EntryDetail.as_view(), name="factors-entry"),
    path("v1/emission_factors", api.FactorList.as_view(), name="factors-factors"),
    # ``id``, like the engine's detail routes: the factor is a row of its own, not a child.
    path("v1/emission_factors/<int:id>", api.FactorDetail.as_view(), name="factors-factor"),
    path("sync/dispatch", sync_api.Dispatch.as_view(), name="factors-dispatch"),
    path("sync/api-ingest", sync_api.ApiIngest.as_view(), name="factors-api-ingest"),
    path("sync/factors/<str:data_entry_type>", sync_api.FactorUpload.as_view(), name="factors-upload"),
    path("sync/units", sync_api.UnitSync.as_view(), name="factors-units"),
    path(
        "sync/recalculate-emissions/<str:data_entry_type>",
        sync_api.Recalculate.as_view(),
        name="factors-recalculate",
    ),
    path("sync/pipelines/<uuid:pipeline_id>", sync_api.PipelineDetail.as_view(), name="factors-pipeline"),
]
