"""URL wiring: pages, the REST API under /api/, the admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from annotation import accounts as annotation_accounts
from annotation import api as annotation_api
from annotation import onboarding_api
from annotation import views as annotation_views
from core import accounts
from crowd import accounts as crowd_accounts
from crowd import api as crowd_api
from crowd import views as crowd_views
from leaderboard import api as leaderboard_api
from leaderboard import release_pages
from leaderboard import views as leaderboard_views
from tasks import api as tasks_api
from tasks import endpoint_api
from tasks import views as tasks_views

router = DefaultRouter()
router.register("tasks", tasks_api.TaskViewSet, basename="task")

api_patterns = [
    path("", include(router.urls)),
    path("tasks/<slug:slug>/rounds/", annotation_api.RoundList.as_view(), name="round-list"),
    path("tasks/<slug:slug>/rounds/<int:number>/", annotation_api.RoundDetail.as_view(), name="round-detail"),
    path("tasks/<slug:slug>/rounds/<int:number>/stats/", annotation_api.RoundStats.as_view(), name="round-stats"),
    path("tasks/<slug:slug>/rounds/<int:number>/open/", annotation_api.RoundOpen.as_view(), name="round-open"),
    path("tasks/<slug:slug>/rounds/<int:number>/close/", annotation_api.RoundClose.as_view(), name="round-close"),
    path("tasks/<slug:slug>/rounds/<int:number>/targets/", annotation_api.RoundTargets.as_view(),
         name="round-targets"),
    path("tasks/<slug:slug>/train-next/", leaderboard_api.TrainNext.as_view(), name="train-next"),
    path("tasks/<slug:slug>/promote/", leaderboard_api.Promote.as_view(), name="promote"),
    path("tasks/<slug:slug>/models/", leaderboard_api.ModelList.as_view(), name="model-list"),
    path("tasks/<slug:slug>/leaderboard/", leaderboard_api.Leaderboard.as_view(), name="leaderboard"),
    path("tasks/<slug:slug>/jobs/", tasks_api.JobList.as_view(), name="job-list"),
    path("tasks/<slug:slug>/releases/", leaderboard_api.ReleaseList.as_view(), name="release-list"),
    path("tasks/<slug:slug>/releases/<int:version>/", leaderboard_api.ReleaseDetail.as_view(),
         name="release-detail"),
    path("models/<int:pk>/", leaderboard_api.ModelDetail.as_view(), name="model-detail"),
    path("models/<int:pk>/evaluate/", leaderboard_api.ModelEvaluate.as_view(), name="model-evaluate"),
    path("tasks/<slug:slug>/endpoints/", endpoint_api.EndpointList.as_view(), name="endpoint-list"),
    path("models/<int:pk>/health-check/", endpoint_api.EndpointHealthCheck.as_view(), name="endpoint-health"),
    path("jobs/<int:pk>/", tasks_api.JobDetail.as_view(), name="job-detail"),
    path("jobs/<int:pk>/cancel/", tasks_api.JobCancel.as_view(), name="job-cancel"),
    path("jobs/<int:pk>/rerun/", tasks_api.JobRerun.as_view(), name="job-rerun"),
    path("tasks/<slug:slug>/rounds/<int:number>/contexts/", tasks_api.RoundContextUpload.as_view(),
         name="round-contexts-upload"),
    path("tasks/<slug:slug>/contexts/", tasks_api.ContextList.as_view(), name="context-list"),
    path("tasks/<slug:slug>/contexts/next/", annotation_api.NextContext.as_view(), name="context-next"),
    path("tasks/<slug:slug>/sessions/", annotation_api.SessionCreate.as_view(), name="session-create"),
    path("tasks/<slug:slug>/examples/", annotation_api.TaskExamples.as_view(), name="example-create"),
    path("tasks/<slug:slug>/onboarding/", onboarding_api.Onboarding.as_view(), name="onboarding"),
    path("tasks/<slug:slug>/onboarding/answers/", onboarding_api.OnboardingAnswer.as_view(),
         name="onboarding-answer"),
    path("tasks/<slug:slug>/validations/next/", annotation_api.NextValidation.as_view(), name="validation-next"),
    path("tasks/<slug:slug>/validators/", annotation_api.ValidatorList.as_view(), name="validator-list"),
    path("examples/<int:pk>/", annotation_api.ExampleDetail.as_view(), name="example-detail"),
    path("examples/<int:pk>/explanation/", annotation_api.ExampleExplanation.as_view(), name="example-explanation"),
    path("examples/<int:pk>/retract/", annotation_api.ExampleRetract.as_view(), name="example-retract"),
    path("examples/<int:pk>/flag/", annotation_api.ExampleFlag.as_view(), name="example-flag"),
    path("examples/<int:pk>/unflag/", annotation_api.ExampleUnflag.as_view(), name="example-unflag"),
    path("examples/<int:pk>/gold/", annotation_api.ExampleGold.as_view(), name="example-gold"),
    path("examples/<int:pk>/blind-answer/", annotation_api.BlindAnswer.as_view(), name="example-blind-answer"),
    path("examples/<int:pk>/reveal/", annotation_api.ExampleReveal.as_view(), name="example-reveal"),
    path("examples/<int:pk>/validations/", annotation_api.ExampleValidate.as_view(), name="example-validate"),
    path("me/", crowd_api.Me.as_view(), name="me"),
    path("auth/token/", accounts.obtain_auth_token, name="token"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
]

urlpatterns = [
    path("", annotation_views.home, name="home"),
    path("healthz", tasks_views.healthz, name="healthz"),
    path("tasks/<slug:slug>/", leaderboard_views.task_detail, name="task-detail"),
    path("tasks/<slug:slug>/create/", annotation_views.create_page, name="annotate"),
    path("tasks/<slug:slug>/validate/", annotation_views.validate_page, name="validate"),
    path("tasks/<slug:slug>/loop/", leaderboard_views.task_action, name="task-action"),
    path("tasks/<slug:slug>/promote/<int:pk>/", leaderboard_views.promote_confirm, name="promote-confirm"),
    path("tasks/<slug:slug>/leaderboard/", leaderboard_views.leaderboard_page, name="leaderboard-page"),
    path("tasks/<slug:slug>/submit/", leaderboard_views.submit_page, name="submit-model"),
    path("tasks/<slug:slug>/examples/", release_pages.public_examples, name="public-examples"),
    path("tasks/<slug:slug>/releases/<int:version>/<path:name>", release_pages.release_file,
         name="release-file"),
    path("models/<int:pk>/", leaderboard_views.model_page, name="model-page"),
    path("jobs/<int:pk>/", leaderboard_views.job_page, name="job-detail"),
    path("jobs/<int:pk>/file/", tasks_views.job_file, name="job-file"),
    path("mturk/hit/", crowd_views.hit_page, name="mturk-hit"),
    path("mturk/hit/submit/", crowd_views.hit_submit, name="mturk-hit-submit"),
    path("mturk/me/", crowd_views.hit_my_page, name="mturk-me"),
    path("prolific/submit/", crowd_views.prolific_submit, name="prolific-submit"),
    path("prolific/<str:batch_uid>/", crowd_views.prolific_entry, name="prolific-entry"),
    path("me/", crowd_views.my_page, name="me"),
    path("api/", include((api_patterns, "api"))),
    path("accounts/login/", accounts.ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/signup/", annotation_accounts.signup, name="signup"),
    path("accounts/verify/<str:uidb64>/<str:token>/", annotation_accounts.verify_email, name="verify-email"),
    path("accounts/verify/send/", annotation_accounts.send_verification, name="verify-email-send"),
    path("accounts/delete/", crowd_accounts.delete_page, name="delete-account"),
    path("accounts/password-reset/", annotation_accounts.ThrottledPasswordResetView.as_view(),
         name="password_reset"),
    path("accounts/password-reset/sent/", auth_views.PasswordResetDoneView.as_view(), name="password_reset_done"),
    path("accounts/reset/<uidb64>/<token>/", auth_views.PasswordResetConfirmView.as_view(),
         name="password_reset_confirm"),
    path("accounts/reset/done/", auth_views.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
    path("admin/login/", accounts.admin_login),  # before admin.site.urls: the same lockout as the site's
    path("admin/", admin.site.urls),
]

handler404 = "core.api.not_found"
handler500 = "core.api.server_error"

admin.site.site_header = "Dynabench administration"
admin.site.site_title = "Dynabench"
