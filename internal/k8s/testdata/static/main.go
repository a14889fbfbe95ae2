// Command static is the test binary put into an image by image_test.go.
package main

import "fmt"

func main() { fmt.Println("static") }
