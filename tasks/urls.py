from django.urls import path

from . import views

app_name = "tasks"
urlpatterns = [
    path("<slug:slug>/", views.task_detail, name="detail"),
]
