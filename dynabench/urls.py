from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.authtoken.views import obtain_auth_token
from rest_framework.routers import DefaultRouter

from tasks import api as tasks_api
from tasks import views as tasks_views

router = DefaultRouter()
router.register("tasks", tasks_api.TaskViewSet, basename="task")

api_patterns = [
    path("", include(router.urls)),
    path("tasks/<slug:slug>/rounds/", tasks_api.RoundList.as_view(), name="round-list"),
    path("tasks/<slug:slug>/rounds/<int:number>/", tasks_api.RoundDetail.as_view(), name="round-detail"),
    path("tasks/<slug:slug>/contexts/", tasks_api.ContextList.as_view(), name="context-list"),
    path("auth/token/", obtain_auth_token, name="token"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
]

urlpatterns = [
    path("", tasks_views.home, name="home"),
    path("healthz", tasks_views.healthz, name="healthz"),
    path("tasks/", include("tasks.urls")),
    path("api/", include((api_patterns, "api"))),
    path("admin/", admin.site.urls),
]

admin.site.site_header = "Dynabench administration"
admin.site.site_title = "Dynabench"
