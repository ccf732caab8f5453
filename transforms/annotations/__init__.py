"""Beam-free readers of object annotations (COCO, Pascal VOC, YOLO) into typed elements."""
